package a1111test

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
		o = Options{JobDuration: g.Job, LoadDelay: g.Load, UnloadDelay: g.Unload, NotLoadedAtStart: g.EmptyAtStart}
	}
	s := NewServer(card, o)
	// Its job marks are the job's label (route and number) then " start"
	// or " end: OUTCOME".
	return engine.Fake{URL: s.URL(), Close: s.Close, JobPath: "/sdapi/v1/txt2img", JobBody: `{"prompt":"a lighthouse at dusk","steps":6,"width":512,"height":512}`,
		Marks: engine.FakeMarks{Arrived: " start", Ended: " end: ", Freed: "checkpoint off GPU"}, Server: s}
}
