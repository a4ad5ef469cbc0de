package comfytest

import (
	"fmt"
	"sync/atomic"

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
		o = Options{JobDuration: g.Job, FreeDelay: g.Unload}
	}
	s := NewUnstarted(card, o)
	if l, ok := g.Listen(); ok {
		s.Listener.Close()
		s.Listener = l
	}
	s.Start()
	var seed atomic.Int64
	return engine.Fake{URL: s.URL, Close: s.Close, JobPath: "/prompt", JobBody: fmt.Sprintf(promptOf, 0),
		// A graph run again is answered from ComfyUI's cache: each
		// job has its own seed.
		NewJob: func() string { return fmt.Sprintf(promptOf, seed.Add(1)) },
		// The job has ended when ComfyUI writes its history entry and
		// takes it off the queue, ~100 ms after its final message.
		Marks:  engine.FakeMarks{Arrived: "queued", Ended: "history ", Freed: "free"},
		Server: s}
}

// promptOf is a two-node prompt, %d its seed.
const promptOf = `{"prompt":{"3":{"class_type":"KSampler","inputs":{"seed":%d}},"9":{"class_type":"SaveImage","inputs":{}}}}`
