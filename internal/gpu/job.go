package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/eta"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// Job describes the image work holding the GPU.
type Job struct {
	PromptID string    `json:"prompt_id,omitempty"`
	Engine   string    `json:"engine,omitempty"` // the image engine's name
	Source   string    `json:"source"`           // "proxy", or the image engine's name (started there directly)
	Phase    string    `json:"phase"`            // "unloading", "submitting", "running", "draining queue"
	Started  time.Time `json:"started"`
	// InterruptOverdue is set once the job was interrupted (a cancel,
	// job_timeout) and its engine did not show its end within
	// interrupt_grace: it keeps the GPU, and the interrupt is sent again,
	// until the engine does or an operator abandons it (force).
	InterruptOverdue bool `json:"interrupt_overdue,omitempty"`
	// OverdueSince is when the first of those interrupts was sent.
	OverdueSince *time.Time `json:"interrupt_overdue_since,omitempty"`

	// workflow is the job's workflow signature, and ran when its engine
	// had the GPU (the LLM engines emptied, the engine readied; zero
	// until then): what its expected end is reckoned from (predict.go).
	workflow string
	ran      time.Time
}

// ImageJob is one image prompt sent through the turnstile, from the moment
// it has the GPU to its end. It owns the GPU until it ends: through End if
// no job was queued, or by itself after Submitted once the job it queued
// has ended. Either way the GPU is given back exactly once.
type ImageJob struct {
	use
	e       ImageEngine
	started time.Time
	source  string
	stop    *jobStop // what a cancel follows (cancel.go)
	// workflow is the job's signature (ImageRun.Workflow), whose known
	// peak may keep co_resident models loaded through it; kept is what
	// Prepare kept (nil: nothing), and prepared when it ended.
	workflow string
	kept     *keepPlan
	prepared time.Time
}

// ErrNoEngine is returned for a job on an image engine the turnstile does
// not have.
var ErrNoEngine = errors.New("no such image engine")

// BeginImage waits, until ctx ends, for the GPU alone for an image job on
// the image engine named engine (the first one if "").
func (g *GPU) BeginImage(ctx context.Context, engine string) (*ImageJob, error) {
	first := g.cfg().imageEngine(engine)
	if first == nil {
		return nil, fmt.Errorf("%w: %q", ErrNoEngine, engine)
	}
	w := waiterFrom(ctx)
	w.engine = first.Name()
	ctx = WithWaiter(ctx, w)
	tr := traced{req: linkOf(ctx), kind: "image", engine: first.Name()}
	span := g.startWait(ctx, &tr)
	err := g.acquireExclusive(ctx, lock.ImageJob)
	EndSpan(span, err)
	if err != nil {
		return nil, err
	}
	// The engine as the config that is current now has it: a reload
	// while the job waited made new adapters.
	u := use{g: g, c: g.cfg(), tr: tr}
	e := u.c.imageEngine(engine)
	if e == nil {
		u.end()
		return nil, fmt.Errorf("%w: %q (dropped by a reload)", ErrNoEngine, engine)
	}
	j := &ImageJob{use: u, e: e, started: time.Now(), source: "proxy", stop: newJobStop(g.ctx), workflow: waiterFrom(ctx).workflow}
	g.update(func() {
		g.act.image = j
		g.setJobLocked(&Job{Engine: e.Name(), Source: j.source, Phase: "unloading", Started: j.started, workflow: j.workflow})
	})
	return j, nil
}

// Engine returns the job's image engine.
func (j *ImageJob) Engine() ImageEngine { return j.e }

// Prepare empties the LLM engines and frees the other image engines for
// the job, and readies its own engine. If that fails, the job has ended
// ("refused"): the GPU is given back and the error says why.
func (j *ImageJob) Prepare() error {
	ctx, span := j.tr.start(j.g, "gpu_turnstile.unload")
	kept, err := j.g.emptyForExclusive(ctx, j.c, j.e, j.workflow)
	if err == nil {
		j.warmAfter, j.kept = true, kept
		err = j.ready(ctx)
	}
	j.prepared = time.Now()
	if err == nil {
		j.g.updateJob(j, func(job *Job) { job.ran = j.prepared })
	}
	EndSpan(span, err)
	if err != nil {
		j.finish("", "refused")
		j.g.log().Error("image job refused: the GPU could not be readied for it", zap.Error(err))
		return err
	}
	return nil
}

// ready runs the engine's own step before a job, if it has one.
func (j *ImageJob) ready(ctx context.Context) error {
	p, ok := j.e.(Preparer)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, j.c.UnloadTimeout)
	defer cancel()
	// The step loads memory (A1111's checkpoint back on the GPU), even
	// when it fails part way or the job then ends unsent: the engine owes
	// a free from now on, before anyone else has the GPU.
	j.g.owe(j.e)
	start := time.Now()
	err := p.Prepare(ctx)
	stepEvent(ctx, "readied", j.e.Name(), time.Since(start), err)
	if err != nil {
		j.g.reached(j.e, err)
		j.g.metrics.UpstreamError(upstreamKind(j.e), j.e.Name(), "prepare")
		return fmt.Errorf("%s not readied for the job: %w", j.e.Name(), err)
	}
	took := time.Since(start)
	j.g.learnStep(j.e.Name(), eta.Prepare, took)
	if took > time.Millisecond {
		j.g.addEvent("prepare", took, j.e.Name())
	}
	return nil
}

// ErrCancelledBeforeSent is returned by Submitting for a job whose cancel
// came before it was forwarded: it has ended ("cancelled"), unsent.
var ErrCancelledBeforeSent = errors.New("image job cancelled before it was sent to its engine")

// Submitting marks the job as being forwarded to its engine, which may
// hold memory from then on; a synchronous job runs from then on. A job
// already cancelled ends instead, unsent, with ErrCancelledBeforeSent.
func (j *ImageJob) Submitting() error {
	if j.stop.wasAsked() {
		j.End("cancelled")
		return ErrCancelledBeforeSent
	}
	phase := "submitting"
	if j.e.Synchronous() {
		phase = "running"
		j.stop.putOnEngine("")
	}
	j.g.setPhase(phase)
	j.g.setState(j.e, stateRunning)
	return nil
}

// End ends a job that queued nothing on the image engine, as far as its
// answer shows: outcome says why ("cancelled", "rejected", "failed"). A
// forward that failed ("failed": the upstream broke off, its answer was
// lost) may have left the work with the engine all the same, so the
// engine owes a free.
func (j *ImageJob) End(outcome string) {
	if outcome == "failed" {
		j.g.owe(j.e)
	}
	j.finish("", outcome)
}

// Ran ends the request of a synchronous job, which was the job (see
// ImageEngine.Synchronous); outcome is "success", "failed", or "timeout"
// if job_timeout cut it. The engine ran it and owes a free. The GPU stays
// the job's until the engine is idle: work started on it directly and
// queued behind the job runs next, and a job cut short still computes
// until it has been interrupted.
func (j *ImageJob) Ran(outcome string) {
	outcome = j.workEnded(outcome)
	j.ran()
	j.g.setPhase("draining queue")
	j.tr.detached = true
	if !j.g.spawn(func() { j.drain(outcome) }) {
		j.finish("", "shutdown") // closing: the job ends here
	}
}

// drain waits, within job_timeout, until a synchronous job's engine is
// idle, interrupting it past that until it is, and ends the job.
func (j *ImageJob) drain(outcome string) {
	g, c, e := j.g, j.c, j.e
	_, span := j.tr.start(g, "gpu_turnstile.job")
	if outcome != "timeout" {
		ctx, cancel := context.WithTimeout(j.stop.ctx, c.JobTimeout-time.Since(j.started))
		err := e.WaitIdle(ctx, g.currentWatcher(e))
		cancel()
		outcome = j.waitResult(outcome, err)
	}
	if outcome == "timeout" {
		outcome = j.overrun("")
	}
	endJobSpan(span, outcome)
	j.finish("", outcome)
}

// waitResult is the result of a job whose wait for its engine ended with
// err: outcome if nil, else why it ended early ("shutdown", "abandoned")
// or "timeout" (job_timeout).
func (j *ImageJob) waitResult(outcome string, err error) string {
	switch {
	case err == nil:
		return outcome
	case j.g.ctx.Err() != nil:
		return "shutdown"
	case j.abandoned():
		return "abandoned"
	}
	return "timeout"
}

// ran records that work ran on the job's engine.
func (j *ImageJob) ran() {
	j.owesFree = true
	j.g.owe(j.e)
}

// Submitted says the image engine queued the job as id: the GPU stays the
// job's until it has ended and the engine's queue is empty, bounded by
// job_timeout.
func (j *ImageJob) Submitted(id string) {
	j.ran()
	j.g.setPromptID(id)
	j.stop.putOnEngine(id)
	j.g.log().Info("image job queued; holding the GPU until it ends", zap.String("prompt_id", id))
	j.tr.detached, j.tr.promptID = true, id
	if !j.g.spawn(func() { j.holdForJob(id) }) {
		j.finish(id, "shutdown") // closing: the job ends here
	}
}

// holdForJob keeps the GPU until the job has ended and ComfyUI's queue is
// empty, and gives it back: to the next image job directly, or through a
// free to LLM use. Past job_timeout the job is interrupted until it has
// ended (overrun).
func (j *ImageJob) holdForJob(id string) {
	g, c, e := j.g, j.c, j.e
	_, span := j.tr.start(g, "gpu_turnstile.job")
	ctx, cancel := context.WithTimeout(j.stop.ctx, c.JobTimeout-time.Since(j.started))
	defer cancel()
	w := g.currentWatcher(e)
	outcome, err := e.WaitJob(ctx, id, w)
	if err == nil {
		outcome = j.workEnded(outcome)
	}
	if err == nil && outcome != OutcomeLost {
		g.setPhase("draining queue")
		// Work queued directly on the engine meanwhile would run on a
		// GPU given to LLM use: wait for the whole queue.
		err = e.WaitIdle(ctx, w)
	}
	result := j.waitResult(outcome, err)
	switch {
	case result == "timeout":
		result = j.overrun(id)
	case outcome == OutcomeLost:
		g.log().Warn("image job lost: the image engine no longer knows it (restarted?); releasing the GPU",
			zap.String("prompt_id", id))
	}
	endJobSpan(span, result)
	j.finish(id, result)
}

// finish records a job's end and gives the GPU back. A job that ran (or
// may have run) counts in the metrics and the history.
func (j *ImageJob) finish(id, outcome string) {
	g := j.g
	took := time.Since(j.started)
	if outcome == "success" && !j.prepared.IsZero() {
		ran := time.Since(j.prepared)
		g.learn(func(l *eta.Learned) { l.AddJob(j.workflow, ran) })
	}
	if j.owesFree {
		g.metrics.JobEnded(outcome, took)
		g.addJob(JobEntry{PromptID: id, Engine: j.e.Name(), Source: j.source, Started: j.started, Seconds: took.Seconds(), Outcome: outcome})
		g.log().Info("image job ended", zap.String("prompt_id", id), zap.String("outcome", outcome), zap.Duration("duration", took))
	}
	g.withRun(j.e, func(r *engineRun) {
		if r.state == stateRunning {
			r.state = stateReady
		}
	})
	// Work that never reached the engine has surely stopped; work that
	// did and ended here unconfirmed (timeout, shutdown) may compute on.
	j.stop.end(outcome, !j.owesFree)
	j.stop.stopInterrupting()
	g.dropImageJob(j)
	g.jobEnds(j)
	j.end()
	j.stop.doneOnce.Do(func() { close(j.stop.done) })
	j.stop.abandon() // frees its context
}
