package kinds

import (
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
)

// Every kind in the registry builds an adapter of its class and kind that
// tells its descriptor, and the registry's lists say what the messages
// have always said.
func TestKindsBuildTheirClass(t *testing.T) {
	names := map[string]bool{}
	for _, k := range All {
		if names[k.Name] {
			t.Errorf("%s is registered twice", k.Name)
		}
		names[k.Name] = true
		e, err := k.New(k.Name, "http://127.0.0.1:1", engine.Options{})
		if err != nil {
			t.Fatalf("%s: %v", k.Name, err)
		}
		_, isLLM := e.(engine.LLM)
		if e.Kind() != k.Name || isLLM != (k.Class == engine.ClassLLM) || engine.KindOf(e) != k {
			t.Errorf("%s: built a %s engine (LLM %v), want class %s", k.Name, e.Kind(), isLLM, k.Class)
		}
		if (k.Class == engine.ClassImage) != (len(k.Routes.Jobs) > 0) {
			t.Errorf("%s: %d job routes for class %s", k.Name, len(k.Routes.Jobs), k.Class)
		}
		if _, waker := e.(engine.Waker); waker != k.Sleeps {
			t.Errorf("%s: Sleeps %v, but its adapter is a Waker: %v", k.Name, k.Sleeps, waker)
		}
		if api := Shape("/api/x", k.Name); api != k.Dialect {
			t.Errorf("%s: dialect %v, its routes are answered in %v", k.Name, k.Dialect, api)
		}
		if s := k.Routes.ServesJobsOf; s != "" && !Is(engine.ClassImage, s) {
			t.Errorf("%s serves the job routes of %q, no image kind", k.Name, s)
		}
		if (k.Probe != "") != (k.NewProbe != nil) {
			t.Errorf("%s: probe %q without its constructor, or the other way round", k.Name, k.Probe)
		}
		if k.Probe != "" {
			if p := k.NewProbe(e, 0); p == nil || p.String() != k.Name {
				t.Errorf("%s: probe %v, want one named after its engine", k.Name, p)
			}
		}
	}
	if got := Names(engine.ClassLLM); got != "llamacpp, llamaswap, ollama, vllm" {
		t.Errorf("LLM kinds %q", got)
	}
	if got := Names(engine.ClassImage); got != "a1111, comfyui" {
		t.Errorf("image kinds %q", got)
	}
	if got := WarmNames(); got != "ollama or llamacpp" {
		t.Errorf("warm kinds %q", got)
	}
}

// The registered kinds' naming rules and out-of-memory texts are those
// the orchestration applies.
func TestRegisteredRules(t *testing.T) {
	if got := engine.ModelKey(" llama3.2:latest "); got != "llama3.2" {
		t.Errorf("ModelKey = %q", got)
	}
	if !engine.OutOfMemory([]byte(`{"error":"CUDA out of memory"}`)) || engine.OutOfMemory([]byte(`{"error":"model not found"}`)) {
		t.Errorf("OutOfMemory does not tell the texts apart")
	}
}

// A job's signature is read by its kind, under its kind's prefix.
func TestSignature(t *testing.T) {
	for _, tc := range []struct{ kind, path, body, want string }{
		{"comfyui", "/prompt", `{"prompt":{"1":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":"m"}}}}`, "comfyui:m"},
		{"comfyui", "/queue", `{}`, ""},
		{"a1111", "/sdapi/v1/txt2img", `{}`, "a1111:current@512x512x1"},
		{"a1111", "/sdapi/v1/extra-single-image", `{}`, "a1111:extras:None"},
		{"ollama", "/api/chat", `{}`, ""},
	} {
		if got := Signature(tc.kind, tc.path, []byte(tc.body)); got != tc.want {
			t.Errorf("Signature(%s, %s) = %q, want %q", tc.kind, tc.path, got, tc.want)
		}
	}
}
