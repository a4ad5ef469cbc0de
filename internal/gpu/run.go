package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"
)

// ImageRun is an image request to run as a job: what RunImage needs of
// the HTTP side.
type ImageRun struct {
	Engine   string    // the image engine, by name
	Deadline time.Time // when the wait for the GPU ends
	// Waited, if not nil, is called once the wait for the GPU has ended,
	// whether the GPU was had or not.
	Waited func()
	// Workflow is the job's workflow signature (internal/workflow), under
	// which its memory peak is learned (co_resident); "" for none.
	Workflow string
	// Forward sends the request to the engine under ctx, which outlives
	// the client (the engine has the job whether the client stays or not)
	// and ends at job_timeout. It fills f as it learns what the engine
	// answers, so that what it saw is known even if it panics.
	Forward func(ctx context.Context, f *Forwarded)
}

// Forwarded is what the HTTP side saw of a job's forward to its engine.
type Forwarded struct {
	Status   int    // the status of the engine's answer; 0 if none began
	PromptID string // the prompt_id a queued job's answer named; "" if none
	Err      error  // the forward's error
}

// ErrWaitTimeout is returned for a request whose wait for the GPU reached
// its deadline.
var ErrWaitTimeout = errors.New("waited for the GPU until the deadline")

// ErrAnswerCut is the error of a forward whose answer could not be
// copied to the client.
var ErrAnswerCut = errors.New("the engine's answer was cut short on its way to the client")

// ClientGoneError is returned for a request whose client went away before
// it was sent on; While says when ("after waiting 2s for the GPU").
type ClientGoneError struct{ While string }

func (e *ClientGoneError) Error() string { return "client went away " + e.While }

// RefusedError is returned for a job refused because the GPU could not
// be readied for it (Prepare); nothing was sent to its engine.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// RunImage runs an image request as a job: it waits for the GPU alone,
// empties the LLM engines, forwards the request, and leaves the GPU to
// the job until it has ended: after the answer until the job it queued
// has ended (an engine that queues, ComfyUI), or after the request, whose
// answer is the job's end (a synchronous one, A1111), until its engine is
// idle. ctx is the request's; it carries the waiter (WithWaiter).
//
// It returns the job's outcome as far as the request shows it ("queued"
// for a job left to its watch) and the forward's error; before the
// forward, ErrNoEngine, ErrWaitTimeout, a *ClientGoneError, a
// *RefusedError or ErrCancelledBeforeSent, with nothing sent. A forward
// that panics (reverse_proxy aborts the handler when the answer cannot be
// copied to a client that has gone) ends the job by what it saw, and the
// panic goes on with the same value.
func (g *GPU) RunImage(ctx context.Context, run ImageRun) (string, error) {
	w := waiterFrom(ctx)
	w.workflow = run.Workflow
	ctx = WithWaiter(ctx, w)
	j, err := g.beginBy(ctx, run)
	if err != nil {
		return "", err
	}
	// From here on every path ends the job, which gives the GPU back.
	if err := j.Prepare(); err != nil {
		return "refused", &RefusedError{Err: err}
	}
	if ctx.Err() != nil {
		j.End("cancelled")
		return "cancelled", &ClientGoneError{While: "while the LLM engines were emptied"}
	}
	if err := j.Submitting(); err != nil {
		return "cancelled", err
	}
	g.jobBegins(j, run.Workflow, g.lock.OwesFree())
	g.ranWorkflow(j.e, run.Workflow)
	return j.forward(ctx, run.Forward)
}

// beginBy waits for the GPU alone for run, until its deadline.
func (g *GPU) beginBy(ctx context.Context, run ImageRun) (*ImageJob, error) {
	start := time.Now()
	wctx, cancel := context.WithDeadline(ctx, run.Deadline)
	j, err := g.BeginImage(wctx, run.Engine)
	cancel()
	if run.Waited != nil {
		run.Waited()
	}
	switch {
	case err == nil:
		return j, nil
	case errors.Is(err, ErrNoEngine):
		return nil, err
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return nil, ErrWaitTimeout
	}
	return nil, &ClientGoneError{While: fmt.Sprintf("after waiting %v for the GPU", time.Since(start).Round(time.Millisecond))}
}

// forward sends the job to its engine, detached from the client and
// bounded by job_timeout, and ends it, or leaves it to its watch, by what
// the engine answered.
func (j *ImageJob) forward(ctx context.Context, fwd func(context.Context, *Forwarded)) (string, error) {
	sctx, span := j.g.startSubmit(ctx, j.e)
	fctx, cancel := context.WithTimeout(sctx, j.c.JobTimeout)
	defer cancel()
	var f Forwarded
	returned := false
	defer func() {
		if !returned {
			v := recover() // nil for runtime.Goexit, which goes on by itself
			j.aborted(span, f)
			if v != nil {
				panic(v)
			}
		}
	}()
	fwd(fctx, &f)
	returned = true
	if j.e.Synchronous() {
		return j.answered(span, f, fctx.Err() != nil), f.Err
	}
	return j.queued(span, f), f.Err
}

// queued ends a job whose engine queues work, if its answer queued none
// (no prompt_id in a 2xx answer), and otherwise leaves it to its watch.
func (j *ImageJob) queued(span trace.Span, f Forwarded) string {
	queued := f.Err == nil && f.Status >= 200 && f.Status < 300 && f.PromptID != ""
	endSubmit(span, j.e, queued, f.PromptID, f.Status, f.Err)
	if queued {
		j.Submitted(f.PromptID)
		return "queued"
	}
	outcome := "rejected"
	if f.Err != nil {
		outcome = "failed"
	}
	j.End(outcome)
	if log := j.g.log(); log.Core().Enabled(zap.DebugLevel) {
		log.Debug("image request ended without a job", zap.Int("status", f.Status), zap.Bool("prompt_id", f.PromptID != ""), zap.Error(f.Err))
	}
	return outcome
}

// answered ends the request of a synchronous job, whose answer came at
// its end: a 2xx or 3xx answer is a success, past job_timeout (timedOut)
// a timeout.
func (j *ImageJob) answered(span trace.Span, f Forwarded, timedOut bool) string {
	outcome := "success"
	switch {
	case timedOut:
		outcome = "timeout"
	case f.Err != nil || f.Status >= 500:
		outcome = "failed"
	case f.Status >= 400:
		outcome = "rejected"
	}
	endSyncSubmit(span, outcome, f.Err)
	j.Ran(outcome)
	return outcome
}

// aborted ends a job whose forward did not return (the image of a long
// render, to a closed tab). The engine has the work all the same: a
// queued job whose prompt_id was read is held for, a synchronous one
// (whose answer comes at its end, status 200 once done) is drained;
// either way the GPU is given back once the engine is idle.
func (j *ImageJob) aborted(span trace.Span, f Forwarded) {
	switch {
	case j.e.Synchronous():
		outcome := "failed"
		if f.Status == 200 {
			outcome = "success" // made, if not delivered
		}
		endSyncSubmit(span, outcome, ErrAnswerCut)
		j.Ran(outcome)
	case f.PromptID != "":
		endSubmit(span, j.e, true, f.PromptID, f.Status, nil)
		j.Submitted(f.PromptID)
	default:
		endSubmit(span, j.e, false, "", f.Status, ErrAnswerCut)
		j.End("failed")
	}
}

// startSubmit starts the span of an image job's forward to its engine,
// in a context that outlives the client as the forward does.
func (g *GPU) startSubmit(ctx context.Context, e ImageEngine) (context.Context, trace.Span) {
	ctx = context.WithoutCancel(ctx)
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noop.Span{}
	}
	return StartSpan(ctx, "gpu_turnstile.submit", AttrTurnstile.String(g.name),
		AttrKind.String("image"), AttrEngine.String(e.Name()))
}

// endSubmit ends the span of a forward that queued a job as id, or did
// not: err, or the engine's answer (status) queued nothing.
func endSubmit(span trace.Span, e ImageEngine, queued bool, id string, status int, err error) {
	if span.IsRecording() {
		if queued {
			span.SetAttributes(AttrPromptID.String(id))
		} else if err == nil {
			err = fmt.Errorf("%s answered %d with no prompt_id: no job queued", e.Name(), status)
		}
	}
	EndSpan(span, err)
}

// endSyncSubmit ends the span of a synchronous job's forward, which ran
// the job: outcome is how it ended.
func endSyncSubmit(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		span.SetAttributes(AttrOutcome.String(outcome))
		if err == nil && outcome != "success" {
			err = fmt.Errorf("image job %s", outcome)
		}
	}
	EndSpan(span, err)
}

// ranWorkflow records workflow as the last one sent to e, for the status
// (a front tier reads it); an unknown one changes nothing.
func (g *GPU) ranWorkflow(e Engine, workflow string) {
	if workflow == "" {
		return
	}
	g.withRun(e, func(r *engineRun) { r.lastWorkflow = workflow })
}
