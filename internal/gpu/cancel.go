package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
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
	// interrupted is set once a cancel's interrupt was taken; landed once
	// one is set on the running job of an engine that names none (A1111).
	interrupted, landed atomic.Bool
	// forced is set once an operator abandoned the job (ForceEndJob).
	forced atomic.Bool

	// ctx ends when an operator abandons the job (ForceEndJob) or Caddy
	// stops: every wait of the job for its engine is under it.
	ctx     context.Context
	abandon context.CancelFunc

	mu           sync.Mutex
	interrupting bool // an interrupter runs (interrupt.go)

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

// abandoned reports whether an operator ended the job by force.
func (s *jobStop) abandoned() bool { return s.forced.Load() }

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
	if j.stop.interrupted.Load() {
		switch {
		case outcome == OutcomeLost:
			outcome = "cancelled"
		case outcome == "success" && j.e.Synchronous() && (j.stop.landed.Load() || j.reportsInterrupted()):
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

// setImageJob records j as the job holding the GPU, for CancelJob.
func (g *GPU) setImageJob(j *ImageJob) {
	g.mu.Lock()
	g.imageJob = j
	g.mu.Unlock()
}

// dropImageJob forgets j, and the status's job with it, once it ends:
// under one lock, so that a cancel never sees the status's job without
// j and takes it for work started on the engine directly.
func (g *GPU) dropImageJob(j *ImageJob) {
	g.mu.Lock()
	if g.imageJob == j {
		g.imageJob = nil
	}
	g.setJobLocked(nil)
	g.mu.Unlock()
	g.notify()
}

// jobToCancel returns the image job holding the GPU. The start-up probe
// is no job; work started on an engine directly is not ours to cancel:
// its owner stops it in the engine's own UI, and stopping the running
// item of a queue someone else fills would not free the GPU anyway.
func (g *GPU) jobToCancel() (*ImageJob, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch a := &g.act; {
	case g.imageJob != nil:
		return g.imageJob, nil
	case a.job == nil:
		return nil, fmt.Errorf("%w (state %s)", ErrNoJob, g.lock.State())
	case a.probing:
		return nil, fmt.Errorf("%w: the start-up probe holds the GPU", ErrNoJob)
	default:
		return nil, fmt.Errorf("%w: %s runs work started on it directly (%s); stop it there", ErrNotOurJob, a.job.Source, a.job.Phase)
	}
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
	g.spawn(func() {
		res, err := j.cancel()
		done <- answer{res, err}
	})
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
	if s.interrupted.Load() {
		g.history.addEvent("interrupt", time.Since(start), s.id)
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
