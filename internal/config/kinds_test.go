package config

import (
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

// Every kind in the registry builds an adapter of its class and kind, and
// the registry's lists say what the messages have always said.
func TestKindsBuildTheirClass(t *testing.T) {
	c := &Turnstile{}
	for _, k := range Kinds {
		e, err := k.build(k.Name, "http://127.0.0.1:1", c)
		if err != nil {
			t.Fatalf("%s: %v", k.Name, err)
		}
		_, isLLM := e.(gpu.LLMEngine)
		if e.Kind() != k.Name || isLLM != (k.Class == LLM) {
			t.Errorf("%s: built a %s engine (LLM %v), want class %s", k.Name, e.Kind(), isLLM, k.Class)
		}
		if (k.Class == Image) != (len(k.Jobs) > 0) {
			t.Errorf("%s: %d job routes for class %s", k.Name, len(k.Jobs), k.Class)
		}
		if api := httpapi.ShapeOf("/api/x", k.Name); api != k.API {
			t.Errorf("%s: error shape %v, httpapi answers its routes in %v", k.Name, k.API, api)
		}
		if s := k.ServesJobsOf; s != "" && !IsKind(Image, s) {
			t.Errorf("%s serves the job routes of %q, no image kind", k.Name, s)
		}
	}
	if got := KindNames(LLM); got != "llamacpp, llamaswap, ollama, vllm" {
		t.Errorf("LLM kinds %q", got)
	}
	if got := KindNames(Image); got != "a1111, comfyui" {
		t.Errorf("image kinds %q", got)
	}
	if got := warmKinds(); got != "ollama or llamacpp" {
		t.Errorf("warm kinds %q", got)
	}
	if c.comfy == nil || c.comfyName != "comfyui" {
		t.Errorf("the ComfyUI engine's client is not kept for the VRAM probe")
	}
}
