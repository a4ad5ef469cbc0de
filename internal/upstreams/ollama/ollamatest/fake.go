package ollamatest

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Fake starts a fake on card for the registry's test support
// (engine/kinds/kindstest); opts, if not nil, is its Options or an
// engine.FakeOptions.
func Fake(card *gputest.GPU, opts any) engine.Fake {
	o, _ := opts.(Options)
	g, generic := opts.(engine.FakeOptions)
	if generic {
		o = Options{LoadDelay: g.Load, UnloadDelay: g.Unload, Tokens: g.Tokens, TokenDelay: g.TokenDelay}
	}
	s := NewUnstarted(card, o)
	if l, ok := g.Listen(); ok {
		s.Listener.Close()
		s.Listener = l
	}
	s.Start()
	return engine.Fake{URL: s.URL, Close: s.Close, ChatPath: "/api/chat", ChatModel: "llama3.2", OtherModel: "qwen3:8b",
		Marks: engine.FakeMarks{Arrived: "request /api/chat", Ended: "done /api/chat", Resumed: "load"}, Server: s}
}
