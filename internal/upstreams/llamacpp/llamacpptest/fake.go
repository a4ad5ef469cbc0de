package llamacpptest

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Fake starts a fake on card for the registry's test support
// (engine/kinds/kindstest); opts, if not nil, is its Options or an
// engine.FakeOptions.
func Fake(card *gputest.GPU, opts any) engine.Fake {
	o, _ := opts.(Options)
	if g, ok := opts.(engine.FakeOptions); ok {
		o = Options{LoadDelay: g.Load, StopDelay: g.Unload, Tokens: g.Tokens, TokenDelay: g.TokenDelay}
	}
	s := NewServer(card, o)
	// A chat reaches the router, which spawns the model's child: its load
	// is the request arriving; the request itself runs once it is loaded.
	marks := engine.FakeMarks{Arrived: "load qwen3-8b", Busy: "request /v1/chat/completions", Ended: "served", Resumed: "load"}
	return engine.Fake{URL: s.URL(), Close: s.Close, ChatPath: "/v1/chat/completions", ChatModel: "qwen3-8b", OtherModel: "gemma-3-4b",
		Marks: marks, Server: s}
}
