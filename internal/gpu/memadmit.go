package gpu

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu/ledger"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// ErrNoMemory is returned by AdmitModel in reject mode for a model that
// does not fit in the card's free memory now.
var ErrNoMemory = errors.New("not enough free video memory for the model")

// Admission is an LLM request admitted by AdmitModel: Done records its
// end.
type Admission struct {
	g *GPU
	// led is the admission as the ledger recorded it: its model, its
	// pending load if the model was not loaded, and whether the model's
	// footprint is learned from this load.
	led ledger.Admitted
	// answered is what the forward saw of the answer (ServeLLM).
	answered Answered
}

// AdmitModel admits an LLM request for model, for which the caller holds
// a shared place (TryLLM, WaitLLM), to the card's memory: at once if the
// model is loaded, its footprint unknown, or it fits (with vram_stale
// admit, also while the reading is stale or missing: the whole-card
// rules); else, in reject mode, ErrNoMemory;
// else it gives the shared place back, waits for the card's memory to
// change (a reading, an engine's change) and takes a place again, until
// deadline. With a nil error the caller holds the place and calls Done;
// with an error it holds none.
func (g *GPU) AdmitModel(ctx context.Context, model string, deadline time.Time, reject bool) (*Admission, error) {
	return g.admitModel(ctx, model, deadline, reject, nil)
}

// admitModel is AdmitModel calling waits, if not nil, when the request
// begins to wait for memory (ServeLLM's notices).
func (g *GPU) admitModel(ctx context.Context, model string, deadline time.Time, reject bool, waits func()) (*Admission, error) {
	model = modelKey(model)
	var (
		stopWaiting func()
		waitingFor  string
		since       time.Time
	)
	defer func() {
		if stopWaiting != nil {
			stopWaiting()
		}
	}()
	for {
		ch := g.Changed()
		if a := g.admitNow(ctx, model); a != nil {
			return a, nil
		}
		g.ReleaseLLM()
		if reject {
			return nil, ErrNoMemory
		}
		// The status shows what it waits for: room, or (vram_stale
		// wait) a fresh reading of the card.
		if what := g.memoryWaitsFor(); what != waitingFor {
			if stopWaiting != nil {
				stopWaiting()
			}
			if since.IsZero() {
				since = time.Now()
				if waits != nil {
					waits()
				}
			}
			stopWaiting, waitingFor = g.waitFor(ctx, lock.LLM, since, what), what
		}
		if err := waitChange(ctx, ch, deadline); err != nil {
			return nil, err
		}
		if _, err := g.WaitLLM(ctx, deadline, nil); err != nil {
			return nil, err
		}
	}
}

// admitNow is AdmitModel's first try, for a request that has a shared
// place: its Admission if model (a modelKey) fits now, nil if it would
// have to wait.
func (g *GPU) admitNow(ctx context.Context, model string) *Admission {
	a := g.tryAdmit(model)
	if a != nil && a.led.Learning {
		g.measureBase(ctx, a.led.Pending)
	}
	return a
}

// waitChange waits for ch, or returns the error of a wait that ended:
// ctx's (a *ClientGoneError) or the deadline's (ErrWaitTimeout).
func waitChange(ctx context.Context, ch <-chan struct{}, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return &ClientGoneError{While: "waiting for video memory"}
	case <-t.C:
		return ErrWaitTimeout
	}
}

// memoryWaitsFor is what a request that memory-aware admission did not
// admit waits for (WaiterStatus.WaitingFor): a fresh reading while the
// last is stale or missing, else room on the card. Each reading signals a
// change while it waits.
func (g *GPU) memoryWaitsFor() string {
	c := g.cfg()
	g.mu.Lock()
	defer g.mu.Unlock()
	if c != nil && c.Memory != nil && g.mem.ledger.Stale(c.Memory.rules(), time.Now()) {
		return waitingForReading
	}
	return waitingForVRAM
}

// tryAdmit admits the request if it fits now, and records it: in flight
// for its model, and as a pending load if the model was not loaded.
func (g *GPU) tryAdmit(model string) *Admission {
	c := g.cfg()
	g.mu.Lock()
	defer g.mu.Unlock()
	if c == nil || c.Memory == nil {
		return &Admission{g: g}
	}
	a, ok := g.mem.ledger.TryAdmit(c.Memory.rules(), model, time.Now())
	if !ok {
		return nil
	}
	return g.admittedLocked(a)
}

// admittedLocked is the Admission of what the ledger admitted; a pending
// load is a change (the status shows it). g.mu is held.
func (g *GPU) admittedLocked(a ledger.Admitted) *Admission {
	if a.Pending != 0 {
		g.touch()
	}
	return &Admission{g: g, led: a}
}

// Done records the request's end: status is its answer's, head the start
// of an error answer's body (nil otherwise). An engine's answer that it
// ran out of memory for the model forgets the model's footprint: from
// then on it runs alone.
func (a *Admission) Done(status int, head []byte) {
	if a == nil || a.led.Model == "" {
		return
	}
	g := a.g
	oom := status >= 500 && isOOM(head)
	g.update(func() { g.mem.ledger.End(a.led, oom, time.Now()) })
	if oom {
		g.log().Warn("the engine ran out of video memory for the model: its footprint is forgotten, and it runs alone from now on",
			zap.String("model", a.led.Model), zap.Int("status", status))
	}
}

// isOOM reports whether an error answer's start says the model did not
// fit, in the words of any kind of engine (engine.OutOfMemory).
func isOOM(head []byte) bool { return engine.OutOfMemory(head) }

// memoryCause says why model waits or is refused, for a busy answer.
func (g *GPU) memoryCause(model string) string {
	model = modelKey(model)
	c := g.cfg()
	g.mu.Lock()
	defer g.mu.Unlock()
	if c == nil || c.Memory == nil {
		return "video memory"
	}
	return g.mem.ledger.Cause(c.Memory.rules(), model, time.Now())
}
