// Package kinds is the registry of the kinds of engines the turnstile
// knows: one line per kind below, each kind described by its own package
// under internal/engine. Everything else asks the registry.
package kinds

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/comfyui"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/llamacpp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/llamaswap"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/vllm"
)

// All are the kinds, in the order messages list them (LLM kinds first;
// the first LLM kind that warms is warm_model's default).
var All = []*engine.Kind{
	ollama.Kind,
	llamacpp.Kind,
	llamaswap.Kind,
	vllm.Kind,
	comfyui.Kind,
	a1111.Kind,
}

func init() { engine.Register(All...) }
