package vllmtest

import (
	turnstile "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Fake starts a fake on card for the registry's test support
// (engine/kinds/kindstest); opts, if not nil, is its Options or an
// engine.FakeOptions.
func Fake(card *gputest.GPU, opts any) turnstile.Fake {
	o, _ := opts.(Options)
	if g, ok := opts.(turnstile.FakeOptions); ok {
		o = Options{SleepDelay: g.Unload, WakeDelay: g.WakeOrLoad(), Tokens: g.Tokens, TokenDelay: g.TokenDelay}
	}
	s := NewServer(card, o)
	// vLLM serves the one model it loaded at launch, and is woken after
	// a job: no OtherModel.
	return turnstile.Fake{URL: s.URL(), Close: s.Close, ChatPath: "/v1/chat/completions", ChatModel: "Qwen/Qwen3-8B",
		Marks: turnstile.FakeMarks{Arrived: "request /v1/chat/completions", Ended: "finished /v1/chat/completions", Resumed: "wake"}, Server: s}
}
