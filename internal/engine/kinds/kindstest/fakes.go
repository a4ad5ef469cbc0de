// Package kindstest is the registry's test support: the fake of each kind,
// for the root's tests, the benchmarks and the demo.
package kindstest

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// FakeKind is a kind's fake: the name it uses on a simulated card, and
// how it is started (opts, if not nil, is the fake's own Options).
type FakeKind struct {
	Service string
	Start   func(card *gputest.GPU, opts any) engine.Fake
}

// Fakes are the fakes by kind: one line per kind of the registry.
var Fakes = map[string]FakeKind{
	"ollama":    {"ollama", ollamatest.Fake},
	"llamacpp":  {"llamacpp", llamacpptest.Fake},
	"llamaswap": {"llamaswap", llamaswaptest.Fake},
	"vllm":      {"vllm", vllmtest.Fake},
	"comfyui":   {"comfy", comfytest.Fake},
	"a1111":     {"a1111", a1111test.Fake},
}
