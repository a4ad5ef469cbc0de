package vllmtest_test

import (
	"net/http"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// The engine's memory charges ModelBytes while it is on the GPU: from the
// start, not while asleep, again from the wake.
func TestModelBytesAreCharged(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, vllmtest.Options{ModelBytes: 6 << 30})
	if gpu.Used() != 6<<30 {
		t.Fatalf("used %d at start, want 6 GiB", gpu.Used())
	}
	if a := send(t, http.MethodPost, srv.URL()+"/sleep?level=1", ""); a.status != 200 || gpu.Used() != 0 {
		t.Fatalf("sleep: %d %s, used %d", a.status, a.body, gpu.Used())
	}
	if a := send(t, http.MethodPost, srv.URL()+"/wake_up", ""); a.status != 200 || gpu.Used() != 6<<30 {
		t.Fatalf("wake: %d %s, used %d", a.status, a.body, gpu.Used())
	}
}
