package llamacpptest_test

import (
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

// Each loaded child charges ModelBytes to the simulated GPU until it
// exits.
func TestModelBytesAreCharged(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{ModelBytes: 2 << 30})
	post(t, srv, "/models/load", modelBody(qwen))
	waitStatus(t, srv, gpu, qwen, "loaded")
	if gpu.Used() != 2<<30 {
		t.Fatalf("used %d with a model loaded, want 2 GiB", gpu.Used())
	}
	post(t, srv, "/models/unload", modelBody(qwen))
	waitStatus(t, srv, gpu, qwen, "unloaded")
	if gpu.Used() != 0 {
		t.Fatalf("used %d after the unload", gpu.Used())
	}
}
