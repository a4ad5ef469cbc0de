package llamaswaptest

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
		o = Options{StartDelay: g.Load, StopDelay: g.Unload, Tokens: g.Tokens, TokenDelay: g.TokenDelay}
	}
	s := NewServer(card, o)
	// llama-swap runs one model at a time: no OtherModel.
	return engine.Fake{URL: s.URL(), Close: s.Close, ChatPath: "/v1/chat/completions", ChatModel: "qwen3-8b",
		Marks: engine.FakeMarks{Arrived: "request /v1/chat/completions", Ended: "done /v1/chat/completions", Resumed: "load"}, Server: s}
}
