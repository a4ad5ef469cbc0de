package ollamatest

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Fake starts a fake on card for the registry's test support
// (engine/kinds/kindstest); opts, if not nil, is its Options.
func Fake(card *gputest.GPU, opts any) engine.Fake {
	o, _ := opts.(Options)
	s := NewServer(card, o)
	return engine.Fake{URL: s.URL, Close: s.Close, ChatPath: "/api/chat", ChatModel: "llama3.2", Server: s}
}
