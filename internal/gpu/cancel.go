package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

var (
	// ErrNoJob is returned by CancelJob when no image job holds the GPU.
	ErrNoJob = errors.New("no image job runs")
	// ErrNotOurJob is returned by CancelJob when the GPU is held for work
	// started on an image engine directly, which the turnstile did not
	// send and does not cancel.
	ErrNotOurJob = errors.New("the image work holding the GPU did not come through the turnstile")
	// ErrNotStopped is returned by CancelJob when the engine did not show
	// the job's end within interrupt_grace of the interrupt.
	ErrNotStopped = errors.New("image job not seen to stop")
	// ErrInterruptFailed is returned by CancelJob when the engine did not
	// take the interrupt.
	ErrInterruptFailed = errors.New("interrupt not accepted")
)

// Cancelled is how a cancelled job ended: the answer to a cancel.
type Cancelled struct {
	// PromptID is ComfyUI's id of the job; nil for a job that has none
	// (A1111's, or one that ended before it was queued).
	PromptID *string `json:"prompt_id"`
	Engine   string  `json:"engine"`
	// Outcome is "interrupted" when the interrupt stopped it; otherwise
	// how it ended meanwhile: "success" or "error" (it finished before
	// the interrupt took effect), "cancelled" (it never ran: not sent
	// yet, or taken out of the engine's queue before it started),
	// "rejected", "failed" or "refused" (it never reached the engine),
	// "lost" (the engine restarted), "abandoned" (an operator handed the
	// GPU on with ForceEndJob while it may still compute).
	Outcome string `json:"outcome"`
}

// jobStop is what a cancel follows of the job it stops. The job's own
// goroutines (its request, then its watch) signal; the canceller only
// waits and sends the interrupt, so the job alone gives the GPU back.
type jobStop struct {
	asked    chan struct{} // closed once a cancel is asked for
	onEngine chan struct{} // closed once the work is on its engine
	ended    chan struct{} // closed once the work has ended, or the job
	over     chan struct{} // closed once no interrupt is needed: the end confirmed, the job finished or abandoned
	done     chan struct{} // closed once the job has given the GPU back

	askOnce, onEngineOnce, endOnce, overOnce, doneOnce sync.Once

	// ctx ends when an operator abandons the job (ForceEndJob) or Caddy
	// stops: every wait of the job for its engine is under it.
	ctx     context.Context
	abandon context.CancelFunc

	// Under g.mu: interrupted is set once a cancel's interrupt was taken;
	// landed once one is set on the running job of an engine that names
	// none (A1111); forced once an operator abandoned the job
	// (ForceEndJob); interrupting while an interrupter runs
	// (interrupt.go).
	interrupted, landed, forced, interrupting bool

	id        string // the prompt_id, if any; set before onEngine closes
	outcome   string // set before ended closes
	confirmed bool   // the engine showed the end; set with outcome
}

func newJobStop(parent context.Context) *jobStop {
	ctx, abandon := context.WithCancel(parent)
	return &jobStop{asked: make(chan struct{}), onEngine: make(chan struct{}), ended: make(chan struct{}),
		over: make(chan struct{}), done: make(chan struct{}), ctx: ctx, abandon: abandon}
}

// stopInterrupting closes over: the interrupter has nothing left to do.
func (s *jobStop) stopInterrupting() { s.overOnce.Do(func() { close(s.over) }) }

// flag reads one of the job's flags under g.mu.
func (j *ImageJob) flag(f *bool) bool {
	j.g.mu.Lock()
	defer j.g.mu.Unlock()
	return *f
}

// setFlag sets one of the job's flags to v under g.mu, and returns what
// it was.
func (j *ImageJob) setFlag(f *bool, v bool) (was bool) {
	j.g.mu.Lock()
	defer j.g.mu.Unlock()
	was, *f = *f, v
	return was
}

// abandoned reports whether an operator ended the job by force.
func (j *ImageJob) abandoned() bool { return j.flag(&j.stop.forced) }

func (s *jobStop) ask() { s.askOnce.Do(func() { close(s.asked) }) }

func (s *jobStop) wasAsked() bool { return closed(s.asked) }

// putOnEngine records that the work is on its engine, as id ("" for a
// synchronous request, which has none).
func (s *jobStop) putOnEngine(id string) {
	s.onEngineOnce.Do(func() {
		s.id = id
		close(s.onEngine)
	})
}

// promptID is the job's prompt_id once it is on its engine, or nil.
func (s *jobStop) promptID() *string {
	if !closed(s.onEngine) || s.id == "" {
		return nil
	}
	id := s.id
	return &id
}

// end records how the work ended; confirmed says the engine showed it.
// Only the first call counts.
func (s *jobStop) end(outcome string, confirmed bool) {
	s.endOnce.Do(func() {
		s.outcome, s.confirmed = outcome, confirmed
		close(s.ended)
	})
	if confirmed {
		s.stopInterrupting()
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// workEnded records that the job's work has ended on its engine, with the
// outcome the engine gave, and returns the outcome the job records. After
// a cancel's interrupt, a job the engine no longer knows was taken out of
// its queue before it ran, and a synchronous job that answered success
// was interrupted only if its engine says so (A1111 answers both alike,
// with what it has made; an interrupt that came before the job began was
// dropped, and the job ran to its end).
func (j *ImageJob) workEnded(outcome string) string {
	if j.flag(&j.stop.interrupted) {
		switch {
		case outcome == OutcomeLost:
			outcome = "cancelled"
		case outcome == "success" && j.e.Synchronous() && (j.flag(&j.stop.landed) || j.reportsInterrupted()):
			outcome = "interrupted"
		}
	}
	// A synchronous request cut by job_timeout may still compute.
	j.stop.end(outcome, outcome != "timeout")
	return outcome
}

// reportsInterrupted asks a synchronous job's engine whether an interrupt
// stopped the job; false if it cannot tell.
func (j *ImageJob) reportsInterrupted() bool {
	r, ok := j.e.(RunningInterrupter)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(j.g.ctx, j.c.ProbeTimeout)
	defer cancel()
	stopped, err := r.WasInterrupted(ctx)
	if err != nil {
		j.g.log().Warn("could not tell whether the interrupt stopped the job; recording how its request ended",
			zap.String("engine", j.e.Name()), zap.Error(err))
	}
	return stopped
}

// dropImageJob forgets j, and the status's job with it, once it ends:
// in one change, so that a cancel never sees the status's job without j
// and takes it for work started on the engine directly.
func (g *GPU) dropImageJob(j *ImageJob) {
	g.update(func() {
		if g.act.image == j {
			g.act.image = nil
		}
		g.setJobLocked(nil)
	})
}

// jobToCancel returns the image job holding the GPU. The start-up probe
// is no job; work started on an engine directly is not ours to cancel:
// its owner stops it in the engine's own UI, and stopping the running
// item of a queue someone else fills would not free the GPU anyway.
func (g *GPU) jobToCancel() (*ImageJob, error) {
	var (
		j   *ImageJob
		err error
	)
	g.lock.View(func(snap lock.Snapshot) {
		g.mu.Lock()
		defer g.mu.Unlock()
		switch a := &g.act; {
		case a.image != nil:
			j = a.image
		case a.job == nil:
			err = fmt.Errorf("%w (state %s)", ErrNoJob, snap.State)
		case a.probing:
			err = fmt.Errorf("%w: the start-up probe holds the GPU", ErrNoJob)
		default:
			err = fmt.Errorf("%w: %s runs work started on it directly (%s); stop it there", ErrNotOurJob, a.job.Source, a.job.Phase)
		}
	})
	return j, err
}

// CancelJob stops the image job that holds the GPU and returns, with how
// it ended, once its engine has shown the end: ComfyUI's history entry,
// or the end of A1111's request. The job keeps the GPU until then and
// gives it back itself (after draining the engine's queue and a free).
// A job not yet on its engine is waited for: it ends without being sent
// if it has not been forwarded yet, and is interrupted as soon as it has
// been queued. The interrupt is sent again until the engine shows the end;
// past interrupt_grace from the first, CancelJob answers ErrNotStopped,
// while the job keeps the GPU and the interrupt goes on (ForceEndJob hands
// the GPU on). If ctx ends first, CancelJob returns
// ctx.Err() but the cancel stands: it goes on without its caller. It
// returns ErrNoJob, ErrNotOurJob, ErrInterruptFailed or ErrNotStopped.
func (g *GPU) CancelJob(ctx context.Context) (Cancelled, error) {
	j, err := g.jobToCancel()
	if err != nil {
		return Cancelled{}, err
	}
	j.stop.ask()
	type answer struct {
		res Cancelled
		err error
	}
	done := make(chan answer, 1)
	if !g.spawn(func() {
		res, err := j.cancel()
		done <- answer{res, err}
	}) {
		return Cancelled{}, g.ctx.Err() // closing
	}
	select {
	case a := <-done:
		return a.res, a.err
	case <-ctx.Done():
		return Cancelled{}, ctx.Err()
	}
}

// cancel interrupts the job once it is on its engine and waits, up to
// interrupt_grace, for its end. The interrupt is sent again until the
// engine shows the end, beyond interrupt_grace too (interrupt.go). It runs
// detached from the caller, until Caddy stops.
func (j *ImageJob) cancel() (Cancelled, error) {
	g, s := j.g, j.stop
	select {
	case <-s.onEngine:
	case <-s.ended:
	case <-g.ctx.Done():
		return Cancelled{}, g.ctx.Err()
	}
	grace := j.c.InterruptGrace
	start := time.Now()
	if !closed(s.ended) {
		if err := j.interruptUntilOver(); err != nil {
			if g.ctx.Err() != nil {
				return Cancelled{}, g.ctx.Err()
			}
			return j.cancelled(), j.interruptFailed(err)
		}
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-s.ended:
	case <-g.ctx.Done():
		return Cancelled{}, g.ctx.Err()
	case <-t.C:
		return j.cancelled(), fmt.Errorf("%w: %s did not show the job's end within interrupt_grace (%v) of the interrupt; the interrupt is sent again, and the job keeps the GPU until its engine shows the end (DELETE /gpu_turnstile/job?force=1 hands it on)",
			ErrNotStopped, j.e.Name(), grace)
	}
	res := j.cancelled()
	if !s.confirmed {
		return res, fmt.Errorf("%w: the job ended as %q without %s showing that it stopped", ErrNotStopped, s.outcome, j.e.Name())
	}
	if j.flag(&s.interrupted) {
		g.addEvent("interrupt", time.Since(start), s.id)
	}
	g.log().Info("image job cancelled", zap.Stringp("prompt_id", res.PromptID), zap.String("outcome", res.Outcome))
	return res, nil
}

func (j *ImageJob) interruptFailed(err error) error {
	j.g.log().Warn("interrupt for a cancel failed", zap.Stringp("prompt_id", j.stop.promptID()), zap.Error(err))
	return fmt.Errorf("%w by %s: %v; the job runs on", ErrInterruptFailed, j.e.Name(), err)
}

// cancelled is the answer to a cancel of j, with its outcome once ended.
func (j *ImageJob) cancelled() Cancelled {
	res := Cancelled{PromptID: j.stop.promptID(), Engine: j.e.Name()}
	if closed(j.stop.ended) {
		res.Outcome = j.stop.outcome
	}
	return res
}
