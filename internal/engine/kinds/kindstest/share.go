package kindstest

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Start starts the fake of kind on card; opts, if not nil, is the fake's
// own Options. ok is false for a kind without a fake.
func Start(kind string, card *gputest.GPU, opts any) (f engine.Fake, ok bool) {
	fk, ok := Fakes[kind]
	if !ok {
		return engine.Fake{}, false
	}
	f = fk.Start(card, opts)
	f.Service = fk.Service
	return f, true
}

// LLMServices are the names the fakes of the LLM kinds use on a simulated
// card, which they share (gputest.GPU.ShareAmong).
func LLMServices() []string {
	var ss []string
	for _, k := range kinds.Of(engine.ClassLLM) {
		ss = append(ss, Fakes[k.Name].Service)
	}
	return ss
}

// Service is the name the fake of kind uses on a simulated card.
func Service(kind string) string { return Fakes[kind].Service }
