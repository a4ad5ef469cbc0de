package gpu

import (
	"context"
	"errors"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// LLMRun is an LLM request to admit to the GPU and forward: what
// ServeLLM needs of the HTTP side.
type LLMRun struct {
	Reject  bool          // llm_busy_mode reject: no wait for the GPU
	Wait    time.Duration // llm_wait_timeout
	Arrival time.Time     // when the request arrived: its wait counts from it
	// DuringJob is set for a request made from within a running image job
	// (during_job's matcher): it must not wait for that job.
	DuringJob bool
	// Body reads the request's body into memory for its wait.
	Body Body
	// Forward sends the request to its engine while it holds a shared
	// place (an interface, not a func: the caller's state per request is
	// one allocation, not two).
	Forward Forwarder
	// Waiting, if not nil, is called when the request, its body read,
	// starts to wait: for a shared place (not when it holds one at once or
	// goes beside the running job), or, having one, for video memory
	// (vram_admission). memory, if not nil, names what it waits for in
	// the latter case. The func it returns, if not nil, is called once
	// the wait has ended, the wait for memory included, with whether the
	// GPU is now the request's: before Forward if it is.
	Waiting func(memory func() string) (waited func(admitted bool))
}

// Body is what ServeLLM needs of a request's body (internal/admit
// implements it over its wait budget).
type Body interface {
	// Admit reads the body into memory by deadline, within the wait
	// budget. Its error is the caller's to answer (LLMNotAdmitted): the
	// deadline passed, a limit of the budget was reached, or the body
	// could not be read.
	Admit(deadline time.Time) (Ticket, error)
}

// Ticket is a request admitted to wait, with its body read.
type Ticket interface {
	// Waiter is what the status shows of the request (path and model).
	Waiter() Waiter
	// StopWaiting ends its count among the waiting requests.
	StopWaiting()
	// Done gives back whatever it still holds.
	Done()
}

// Forwarder sends an LLM request to its engine and returns the forward's
// error. With a (not nil) it records the answer there as it is written,
// for memory-aware admission, so that it is known even if the forward
// panics.
type Forwarder interface {
	Forward(a *Answered) error
}

// ForwardFunc is a func as a Forwarder.
type ForwardFunc func(a *Answered) error

// Forward implements Forwarder.
func (f ForwardFunc) Forward(a *Answered) error { return f(a) }

// Answered is what a forward saw of an LLM request's answer: its status
// (0 if none was written) and the start of a server error's body.
type Answered struct {
	Status int
	Head   []byte
}

// LLMAnswer says how ServeLLM ended an LLM request.
type LLMAnswer int

const (
	// LLMForwarded: the request was sent to its engine; Err is the
	// forward's.
	LLMForwarded LLMAnswer = iota
	// LLMBusy: reject mode, and the GPU is busy (Cause says with what).
	LLMBusy
	// LLMNoMemory: too little video memory for the model (Cause says how
	// little), at once in reject mode, else after Waited.
	LLMNoMemory
	// LLMDuringJob: a request made from within the running image job
	// (LLMRun.DuringJob), which it must not wait for.
	LLMDuringJob
	// LLMNotAdmitted: the body's reading or the wait for the GPU ended
	// with Err: ErrWaitTimeout, a *ClientGoneError, or Body's error.
	// Cause says what holds the GPU.
	LLMNotAdmitted
)

// LLMServed is how ServeLLM ended an LLM request: what the caller
// answers, if it was not forwarded.
type LLMServed struct {
	Answer   LLMAnswer
	Cause    string        // what keeps the request off the GPU, for a busy answer
	Waited   time.Duration // how long it waited before LLMNoMemory; 0 if it did not
	Deadline time.Time     // the end of its wait, by which a refused body is drained
	Err      error
}

// llmWay is how a request that did not find the GPU free gets a place.
type llmWay int

const (
	wayHeld   llmWay = iota // it holds one already
	wayWait                 // it waits for one
	wayBeside               // it cannot wait: beside the running image job, or busy
)

// ServeLLM admits an LLM request to the GPU and forwards it: the path of
// a request that found no shared place free at once (the fast path is
// TryLLM, ReleaseLLM after). It decides whether the request waits (not in
// reject mode, except during the start-up probe; never one made from
// within the running job), reads its body within the wait budget, waits
// for a shared place or goes beside the running image job (co_resident),
// waits for the card's memory (vram_admission), then calls run.Forward
// and gives the place back however it ends. ctx is the request's.
func (g *GPU) ServeLLM(ctx context.Context, run LLMRun) LLMServed {
	held := g.TryLLM()
	if !held && run.DuringJob && g.imageJobRunning() {
		return LLMServed{Answer: LLMDuringJob}
	}
	way, wait := wayHeld, run.Wait
	if !held {
		var ok bool
		if wait, ok = g.llmWait(run.Reject, run.Wait); ok {
			way = wayWait
		} else if g.coResidentOn() {
			way, wait = wayBeside, run.Wait // bounds the body's reading
		} else {
			return LLMServed{Answer: LLMBusy, Cause: g.busyCause()}
		}
	}
	deadline := run.Arrival.Add(wait)
	t, err := run.Body.Admit(deadline)
	if err != nil {
		if held {
			g.ReleaseLLM()
		}
		return g.notAdmitted(err, deadline)
	}
	defer t.Done()
	waiter := t.Waiter()
	var waited func(bool)
	if way == wayWait {
		ctx = WithWaiter(ctx, waiter) // what its wait shows
		if run.Waiting != nil {
			waited = run.Waiting(nil)
		}
	}
	adm, served, ok := g.placeLLM(ctx, way, waiter.Model, deadline, t.StopWaiting)
	if ok && adm == nil && g.memoryOn() {
		adm, served, ok, waited = g.admitMemory(ctx, run, waiter, deadline, t.StopWaiting, waited)
	}
	if waited != nil {
		waited(ok)
	}
	if !ok {
		return served
	}
	return g.forwardLLM(ctx, run.Forward, adm)
}

// placeLLM takes a shared place for a request whose body has been read,
// the way given: held already; waited for until deadline (or beside the
// running job); or beside the job at once. adm is not nil for a request
// admitted beside the job; ok is false, with the answer, for one that got
// no place.
func (g *GPU) placeLLM(ctx context.Context, way llmWay, model string, deadline time.Time, stop func()) (adm *Admission, _ LLMServed, ok bool) {
	switch way {
	case wayBeside:
		stop()
		if adm := g.TryBeside(model); adm != nil {
			return adm, LLMServed{}, true
		}
		return nil, LLMServed{Answer: LLMBusy, Cause: g.busyCause()}, false
	case wayWait:
		adm, waited, err := g.waitLLMFor(ctx, model, deadline, stop)
		if err != nil {
			return nil, g.notAdmitted(err, deadline), false
		}
		g.metrics.Waited(lock.LLM, waited)
		return adm, LLMServed{}, true
	}
	return nil, LLMServed{}, true
}

// admitMemory admits a request, for which a shared place is held, once
// the card's memory has room for its model (vram_admission); stop ends
// its count among the waiting requests. ok is false, with the answer, if
// it was not admitted: then it holds no place. A request admitted at
// once costs no context and no closure (waitMemory is the rest); waited
// is what to call once its wait has ended.
func (g *GPU) admitMemory(ctx context.Context, run LLMRun, waiter Waiter, deadline time.Time, stop func(), waited func(bool)) (*Admission, LLMServed, bool, func(bool)) {
	if adm := g.admitNow(ctx, modelKey(waiter.Model)); adm != nil {
		stop()
		return adm, LLMServed{}, true, waited
	}
	return g.waitMemory(ctx, run, waiter, deadline, stop, waited)
}

// waitMemory is admitMemory for a request that may have to wait: it
// shows waiter in the status, and is given run.Waiting's notices from
// when it begins to wait for memory (unless waited, those of its wait
// for a place, already run).
func (g *GPU) waitMemory(ctx context.Context, run LLMRun, waiter Waiter, deadline time.Time, stop func(), waited func(bool)) (*Admission, LLMServed, bool, func(bool)) {
	ctx = WithWaiter(ctx, waiter)
	var waits func()
	if waited == nil && run.Waiting != nil {
		model := waiter.Model
		waits = func() { waited = run.Waiting(func() string { return g.memoryCause(model) }) }
	}
	adm, err := g.admitModel(ctx, waiter.Model, deadline, run.Reject, waits)
	stop()
	timedOut := errors.Is(err, ErrWaitTimeout)
	switch {
	case err == nil:
		return adm, LLMServed{}, true, waited
	case timedOut, errors.Is(err, ErrNoMemory):
		served := LLMServed{Answer: LLMNoMemory, Cause: g.memoryCause(waiter.Model), Deadline: deadline}
		if timedOut {
			served.Waited = run.Wait
		}
		return nil, served, false, waited
	}
	return nil, g.notAdmitted(err, deadline), false, waited
}

// notAdmitted is the answer to a request whose body's reading or wait
// ended with err.
func (g *GPU) notAdmitted(err error, deadline time.Time) LLMServed {
	return LLMServed{Answer: LLMNotAdmitted, Err: err, Cause: g.busyCause(), Deadline: deadline}
}

// forwardLLM calls fwd with the shared place the request holds, and gives
// it back however fwd ends. A forward that panics (reverse_proxy aborts
// the handler when the answer cannot be copied to a client that has gone)
// is an abnormal end too, after which the next emptying of the LLM
// engines is confirmed more strictly; the panic goes on. adm, if not nil,
// is told how the answer went.
func (g *GPU) forwardLLM(ctx context.Context, fwd Forwarder, adm *Admission) LLMServed {
	var a *Answered
	if adm != nil {
		a = &adm.answered
	}
	returned := false
	defer func() {
		if !returned {
			g.NoteLLMEnd(ctx, ErrAnswerCut)
		}
		if adm != nil {
			adm.Done(a.Status, a.Head)
		}
		g.ReleaseLLM()
	}()
	err := fwd.Forward(a)
	returned = true
	g.NoteLLMEnd(ctx, err)
	return LLMServed{Answer: LLMForwarded, Err: err}
}

// memoryOn reports whether memory-aware admission (vram_admission) is on.
func (g *GPU) memoryOn() bool {
	c := g.cfg()
	return c != nil && c.Memory != nil
}

// coResidentOn reports whether some model may run beside image jobs
// (co_resident): a request that cannot wait is then still read for its
// model.
func (g *GPU) coResidentOn() bool {
	c := g.cfg()
	return c != nil && c.Memory != nil && len(c.Memory.CoResident) > 0
}
