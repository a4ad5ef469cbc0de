package notice

import (
	"net/http"
	"time"
)

// Source is what a Wait needs of the turnstile (a *gpu.GPU).
type Source interface {
	// Changed returns a channel closed at the GPU's next change.
	Changed() <-chan struct{}
	// WaitCause names what keeps a waiting LLM request off the GPU now.
	WaitCause() string
	// WaitOutlook is what a waiting LLM request can expect now: its
	// place in line (0 if not known) and, if known, how long until it
	// starts.
	WaitOutlook() (position int, wait time.Duration, known bool)
}

// ForMemory is src for a request that waits for video memory
// (vram_admission) rather than for a place: cause names what it lacks,
// and its place in line is not told.
func ForMemory(src Source, cause func() string) Source { return memorySource{src, cause} }

type memorySource struct {
	Source
	cause func() string
}

func (m memorySource) WaitCause() string { return memoryPrefix + m.cause() }

func (m memorySource) WaitOutlook() (int, time.Duration, bool) { return 0, 0, false }

// minGap bounds how often a change of the GPU is told: changes come in
// bursts, and a notice that says the same is not sent at all.
const minGap = 250 * time.Millisecond

// Wait sends one waiting request its notices: the first at once, with
// the response's head, then one every interval and at each change of
// what it waits for, until Waited.
type Wait struct {
	w       http.ResponseWriter
	shape   Shape
	model   string
	src     Source
	arrival time.Time
	every   time.Duration

	stop, done chan struct{}
	last       State // the last notice's; the loop's until done
	broken     bool  // a write to the client failed: nothing more is sent
	engine     engineWriter
}

// Start begins the notices of a request that waits for the GPU and that
// streams in shape s, as its whole body says (Read; nil if not known in
// full): the head and the first notice are written and flushed together
// (Caddy's encode holds a head until the first write), and then a
// notice every interval and at each change of src. It returns nil, and
// writes nothing, for a request that does not stream. arrival is when
// the request arrived: its wait counts from it.
func Start(w http.ResponseWriter, s Shape, body []byte, every time.Duration, src Source, arrival time.Time) *Wait {
	model, streams := Read(s, body)
	if !streams {
		return nil
	}
	n := &Wait{w: w, shape: s, model: model, src: src, arrival: arrival, every: every,
		stop: make(chan struct{}), done: make(chan struct{})}
	n.engine.w = w
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", s.contentType())
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	n.last = n.state()
	n.send(n.last)
	go n.loop()
	return n
}

// state is the wait's state now.
func (n *Wait) state() State {
	st := State{Cause: n.src.WaitCause(), Waited: time.Since(n.arrival)}
	st.Position, st.Expected, st.Known = n.src.WaitOutlook()
	return st
}

// loop sends the notices after the first until stop.
func (n *Wait) loop() {
	defer close(n.done)
	tick := time.NewTicker(n.every)
	defer tick.Stop()
	for {
		changed := n.src.Changed()
		select {
		case <-n.stop:
			return
		case <-tick.C:
			n.last = n.state()
			n.send(n.last)
		case <-changed:
			if st := n.state(); !sameText(st, n.last) {
				n.last = st
				n.send(st)
			}
			// A closed GPU's channel stays closed: wait a little either way.
			select {
			case <-n.stop:
				return
			case <-time.After(minGap):
			}
		}
	}
}

// Waited ends the notices, as gpu.LLMRun's Waiting asks: a request that
// now has the GPU is told how long it waited and for what (its last
// notice's cause), before the engine's stream; one that does not gets
// its last chunk from Finish.
func (n *Wait) Waited(admitted bool) {
	close(n.stop)
	<-n.done
	if admitted {
		n.send(State{Cause: n.last.Cause, Waited: time.Since(n.arrival), Admitted: true})
	}
}

// send writes a notice and flushes it.
func (n *Wait) send(st State) {
	n.write(noticeChunk(n.shape, n.model, Text(st), time.Now()))
}

// write writes a chunk and flushes it, unless a write already failed.
func (n *Wait) write(b []byte) {
	if n.broken {
		return
	}
	if _, err := n.w.Write(b); err != nil {
		n.broken = true
		return
	}
	if http.NewResponseController(n.w).Flush() != nil {
		n.broken = true
	}
}

// Writer is the writer the rest of the request writes its answer to,
// once Waited has returned: the engine's stream through reverse_proxy, or
// a refusal (internal/httpapi's answers). Its status line and headers are
// swallowed, the head having been sent; a status other than 2xx keeps
// its body for Finish.
func (n *Wait) Writer() http.ResponseWriter { return &n.engine }

// Finish ends the response after the answer, given err, the error the
// forward or the answer returned: an answer with a status other than 2xx,
// or an error, is told in a last chunk in the API's error shape. It
// returns nil: the response has been given, and nothing else may be
// written to it.
func (n *Wait) Finish(err error) error {
	e := &n.engine
	switch {
	case e.failed():
		msg, typ := errorOf(e.body, e.status)
		n.write(errorChunk(n.shape, msg, typ, e.status))
	case err != nil:
		n.write(errorChunk(n.shape, "gpu_turnstile: the answer broke off: "+err.Error(), "", http.StatusBadGateway))
	}
	return nil
}
