package gpu

import (
	"context"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
)

// An interrupt is sent again until the engine shows the job's end:
// ComfyUI drops one that arrives in the instant it takes the job from its
// queue (it clears the flag as the job starts), and A1111 one that comes
// before the job begins. Every resendEvery within interrupt_grace, then
// backing off to resendMax: the job keeps the GPU all along.
const (
	resendEvery = 250 * time.Millisecond
	resendMax   = 5 * time.Second
)

// interruptUntilOver starts the job's interrupter unless one runs (a
// cancel and job_timeout share it) and returns the error of its first
// interrupt, which then stops it: the engine did not take it.
func (j *ImageJob) interruptUntilOver() error {
	if j.setFlag(&j.stop.interrupting, true) {
		return nil
	}
	first := make(chan error, 1)
	if !j.g.spawn(func() { j.keepInterrupting(first) }) {
		j.setFlag(&j.stop.interrupting, false)
		return j.g.ctx.Err() // closing
	}
	return <-first
}

// keepInterrupting sends the interrupt, and again, until the job's work is
// over (its end shown, the job finished or abandoned) or Caddy stops.
// Past interrupt_grace from the first it says so once (overdue) and goes
// on, backing off. An engine whose interrupt names no job (A1111) is sent
// none once one is set on the running job.
func (j *ImageJob) keepInterrupting(first chan<- error) {
	g, s := j.g, j.stop
	defer j.setFlag(&s.interrupting, false)
	start := time.Now()
	grace := time.NewTimer(j.c.InterruptGrace)
	defer grace.Stop()
	delay, overdue := resendEvery, false
	for n := 0; ; n++ {
		if !j.flag(&s.landed) {
			err := j.sendOnce(n == 0)
			switch {
			case n == 0:
				first <- err
				if err != nil {
					return
				}
			case err != nil && g.ctx.Err() == nil:
				g.log().Warn("interrupt failed; sending it again", zap.String("engine", j.e.Name()),
					zap.Stringp("prompt_id", s.promptID()), zap.Error(err))
			}
		}
		t := time.NewTimer(delay)
		select {
		case <-s.over:
		case <-g.ctx.Done():
		case <-grace.C:
			overdue = true
			j.markOverdue(start)
		case <-t.C:
		}
		t.Stop()
		if closed(s.over) || g.ctx.Err() != nil {
			return
		}
		if overdue {
			delay = min(delay*2, resendMax)
		}
	}
}

// sendOnce sends one interrupt, within probe_timeout. A refused
// connection is no failure: the engine is gone, and with it the job.
func (j *ImageJob) sendOnce(first bool) error {
	s := j.stop
	ctx, cancel := context.WithTimeout(j.g.ctx, j.c.ProbeTimeout)
	defer cancel()
	// Marked before it is sent: the job may end as it lands (ComfyUI
	// may drop the queued job, and its watch see it gone, before the
	// answer comes).
	wasSet := j.setFlag(&s.interrupted, true)
	var err error
	if ri, ok := j.e.(RunningInterrupter); ok {
		var landed bool
		if landed, err = ri.InterruptRunning(ctx); err == nil || engine.Refused(err) {
			j.setFlag(&s.landed, landed)
		}
	} else {
		err = j.e.Interrupt(ctx, s.id)
	}
	if err == nil || engine.Refused(err) {
		return nil
	}
	if first && !wasSet {
		j.setFlag(&s.interrupted, false) // not asked after all
	}
	return err
}

// markOverdue records that the job outlived interrupt_grace from its first
// interrupt: logged at error, counted, and shown in the status, once.
func (j *ImageJob) markOverdue(since time.Time) {
	g := j.g
	g.log().Error("interrupted image job not seen to stop within interrupt_grace; it keeps the GPU, and the interrupt is sent again, until its engine shows the end (DELETE /gpu_turnstile/job?force=1 hands the GPU on)",
		zap.String("engine", j.e.Name()), zap.Stringp("prompt_id", j.stop.promptID()),
		zap.Duration("interrupt_grace", j.c.InterruptGrace), zap.Time("interrupted_at", since))
	g.metrics.InterruptOverdue(j.e.Name())
	g.updateJob(j, func(job *Job) { job.InterruptOverdue, job.OverdueSince = true, &since })
}

// overrun interrupts a job that has outlived job_timeout until its engine
// shows its end and its queue is empty, however long that takes: the GPU
// is the job's until then, or until an operator abandons it. It returns
// the job's result: "timeout", "abandoned" or "shutdown".
func (j *ImageJob) overrun(id string) string {
	g, c, e, s := j.g, j.c, j.e, j.stop
	g.updateJob(j, func(job *Job) { job.Phase = "interrupting" })
	g.log().Error("image job exceeded job_timeout; interrupting it, and keeping the GPU for it until it has stopped",
		zap.String("prompt_id", id), zap.Duration("job_timeout", c.JobTimeout), zap.Duration("interrupt_grace", c.InterruptGrace))
	start := time.Now()
	if err := j.interruptUntilOver(); err != nil {
		g.log().Warn("interrupt failed; sending it again", zap.String("prompt_id", id), zap.Error(err))
		j.g.spawn(func() { j.retryInterrupter() })
	}
	w := g.currentWatcher(e)
	// A synchronous job's request has returned already: its engine's
	// queue emptying is its end.
	outcome, err := e.WaitJob(s.ctx, id, w)
	if err == nil && !e.Synchronous() {
		j.workEnded(outcome)
	}
	if err == nil {
		err = e.WaitIdle(s.ctx, w)
	}
	s.stopInterrupting()
	switch {
	case err == nil:
		g.addEvent("interrupt", time.Since(start), id)
		g.log().Info("interrupted image job stopped", zap.String("prompt_id", id), zap.String("outcome", outcome), zap.Duration("after", time.Since(start)))
		return "timeout"
	case j.abandoned():
		return "abandoned"
	}
	return "shutdown"
}

// retryInterrupter starts the interrupter again, every resendEvery, while
// its first interrupt fails and the job's work is not over.
func (j *ImageJob) retryInterrupter() {
	for {
		t := time.NewTimer(resendEvery)
		select {
		case <-j.stop.over:
		case <-j.g.ctx.Done():
		case <-t.C:
		}
		t.Stop()
		if closed(j.stop.over) || j.g.ctx.Err() != nil || j.interruptUntilOver() == nil {
			return
		}
	}
}

// ForceEndJob abandons the image job that holds the GPU, as an operator
// asks (by says who, for the log): it is interrupted once more, ends as
// "abandoned", and the GPU is handed on after its engine's free, although
// the engine may still compute. It returns once the job has given the GPU
// back, or ctx.Err() if ctx ends first (the force stands). A synchronous
// job's request is not cut: the job is abandoned once its request returns
// (the interrupt stops it at its next step, job_timeout at the latest). It
// returns ErrNoJob or ErrNotOurJob as CancelJob does.
func (g *GPU) ForceEndJob(ctx context.Context, by string) (Cancelled, error) {
	if names := g.ForgetProcesses(by); len(names) > 0 {
		// What keeps the GPU from the next job is not a job.
		return Cancelled{Engine: strings.Join(names, ","), Outcome: OutcomeForgotten}, nil
	}
	j, err := g.jobToCancel()
	if err != nil {
		return Cancelled{}, err
	}
	s := j.stop
	s.ask()
	if closed(s.onEngine) && !closed(s.over) {
		if err := j.sendOnce(false); err != nil {
			g.log().Warn("interrupt before the forced end failed", zap.String("engine", j.e.Name()), zap.Error(err))
		}
	}
	if !j.setFlag(&s.forced, true) {
		g.log().Warn("image job abandoned by an operator: the GPU is handed on after the engine's free, while the job may still compute",
			zap.String("engine", j.e.Name()), zap.Stringp("prompt_id", s.promptID()), zap.String("by", by), zap.Time("at", time.Now()))
	}
	s.abandon()
	s.stopInterrupting()
	select {
	case <-s.done:
		return j.cancelled(), nil
	case <-ctx.Done():
		return Cancelled{}, ctx.Err()
	}
}

// updateJob changes the status's job while it is j's.
func (g *GPU) updateJob(j *ImageJob, change func(*Job)) {
	g.update(func() {
		if g.act.image == j && g.act.job != nil {
			job := *g.act.job
			change(&job)
			g.act.job = &job
		}
	})
}
