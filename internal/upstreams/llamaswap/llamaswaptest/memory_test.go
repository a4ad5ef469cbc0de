package llamaswaptest_test

import (
	"net/http"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
)

// A model's process charges ModelBytes to the simulated GPU until it has
// exited.
func TestModelBytesAreCharged(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamaswaptest.Options{ModelBytes: 3 << 30})
	if a := chat(t, srv, qwen, false); a.status != 200 {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
	if gpu.Used() != 3<<30 {
		t.Fatalf("used %d with the model running, want 3 GiB", gpu.Used())
	}
	if a := send(t, http.MethodPost, srv.URL()+"/api/models/unload", "", ""); a.status != 200 {
		t.Fatalf("unload: %d %s", a.status, a.body)
	}
	if gpu.Used() != 0 {
		t.Fatalf("used %d after the unload", gpu.Used())
	}
}
