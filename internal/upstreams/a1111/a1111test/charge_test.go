package a1111test_test

import (
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// The checkpoint charges ModelBytes to the simulated GPU while it is on
// it, and /memory reads a GPU that has a size.
func TestModelBytesAreCharged(t *testing.T) {
	t.Parallel()
	gpu := gputest.New()
	gpu.SetMemory(12 << 30)
	srv := a1111test.NewServer(gpu, a1111test.Options{ModelBytes: 4 << 30})
	t.Cleanup(srv.Close)
	if gpu.Used() != 4<<30 {
		t.Fatalf("used %d at start-up, want 4 GiB", gpu.Used())
	}
	_, cuda := memory(t, srv)
	if figure(cuda, "system", "total") != 12<<30 || figure(cuda, "system", "free") != 8<<30 || figure(cuda, "system", "used") != 4<<30 {
		t.Fatalf("cuda.system %v, want the card's", cuda["system"])
	}
	if a := post(t, srv.URL()+"/sdapi/v1/unload-checkpoint", ""); a.status != 200 || gpu.Used() != 0 {
		t.Fatalf("unload: %d %s, used %d", a.status, a.body, gpu.Used())
	}
	srv.Kill()
	srv.Relaunch()
	if gpu.Used() != 4<<30 || len(gpu.Unbidden()) != 0 {
		t.Fatalf("after a relaunch: used %d, unbidden %v", gpu.Used(), gpu.Unbidden())
	}
}
