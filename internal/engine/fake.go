package engine

import (
	"fmt"
	"net"
	"time"
)

// Fake is a fake engine started for a test, a benchmark or the demo, on a
// simulated card (the fakes under internal/upstreams; the registry's test
// support, engine/kinds/kindstest, lists them by kind).
type Fake struct {
	URL     string
	Close   func()
	Service string // the name it uses on the simulated card

	// An LLM engine's chat route and a model it serves; an image engine's
	// job route and a job it runs.
	ChatPath, ChatModel string
	JobPath, JobBody    string

	// OtherModel is a second model an LLM engine serves beside ChatModel
	// at once, "" if it serves one model at a time.
	OtherModel string
	// NewJob returns a job body each call, a new one where the engine
	// would answer a repeated job from its cache (ComfyUI); nil if
	// JobBody may be repeated.
	NewJob func() string

	// Marks tell from the card's timeline where a request is.
	Marks FakeMarks

	// Server is the fake itself (its package's *Server), for what a test
	// asks of one kind.
	Server any
}

// Job is a job body for f: NewJob's, or JobBody.
func (f Fake) Job() string {
	if f.NewJob != nil {
		return f.NewJob()
	}
	return f.JobBody
}

// FakeMarks are texts of a fake's events on the simulated card
// (gputest.Event.What contains them) that benchmarks and the demo wait
// for without knowing the kind.
type FakeMarks struct {
	Arrived string // a request that uses the GPU reached the engine
	Busy    string // that request runs on the GPU; Arrived if empty (a model may be loaded already)
	Ended   string // its work ended
	Freed   string // an image engine left the GPU at the turnstile's request
	Resumed string // an LLM engine takes the GPU back after a job (a load, a wake)
}

// BusyMark is the mark of a request running on the GPU.
func (m FakeMarks) BusyMark() string {
	if m.Busy != "" {
		return m.Busy
	}
	return m.Arrived
}

// FakeOptions are a fake's timings in terms every kind shares; a fake's
// constructor given them, instead of its own Options, maps them onto
// those. A zero field keeps the fake's default.
type FakeOptions struct {
	Load   time.Duration // a model's load or start; A1111's checkpoint load
	Wake   time.Duration // a sleeping engine's wake (vLLM); Load if zero
	Unload time.Duration // a model's unload or stop, a sleep; an image engine's free
	Job    time.Duration // an image job's run

	Tokens     int           // the tokens a chat streams
	TokenDelay time.Duration // the time between two of them

	// EmptyAtStart starts an engine that loads its model at launch
	// (A1111's checkpoint) with nothing on the GPU.
	EmptyAtStart bool
	// Port is the loopback port to serve on if it is free, for the fakes
	// that can choose theirs; any port if 0 or taken.
	Port int
}

// WakeOrLoad is the wake's delay: Wake, or Load.
func (o FakeOptions) WakeOrLoad() time.Duration {
	if o.Wake != 0 {
		return o.Wake
	}
	return o.Load
}

// Listen takes o.Port on loopback; ok is false if Port is 0 or taken.
func (o FakeOptions) Listen() (l net.Listener, ok bool) {
	if o.Port == 0 {
		return nil, false
	}
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", o.Port))
	return l, err == nil
}
