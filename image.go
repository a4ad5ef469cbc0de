package turnstile

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// imageBodyLimit bounds how much of a /prompt body is read into memory
// before it waits (workflows are JSON graphs, rarely over a few MiB);
// within wait_buffer_limit, like LLM bodies (budget.go).
const imageBodyLimit = 32 << 20

// serveImage serves an image job: it takes the GPU alone, empties the LLM
// engines, forwards the request, and keeps the GPU until the job has
// ended: after the response until the job it queued has ended (ComfyUI),
// or for the whole request, whose answer is the job's end (A1111).
func (h *Handler) serveImage(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	ts := h.ts
	c := ts.cfg()
	e := h.imageEngine(c, r)
	if e == nil {
		return h.serveWithoutEngine(w, r, next, c)
	}
	deadline := admit.Arrival(r).Add(c.ImageWait)
	ticket, err := ts.admitWait(w, r, c, imageBodyLimit, deadline)
	if errors.Is(err, admit.ErrLate) {
		return ts.imageWaitedTooLong(w, r, c, e)
	}
	if err != nil {
		return ts.refuseWait(w, r, c, err, e, deadline)
	}
	defer ticket.done()
	start := time.Now()
	ctx, cancel := context.WithDeadline(gpu.WithWaiter(r.Context(), waiterOf(r, ticket, false)), deadline)
	job, err := ts.BeginImage(ctx, e.Name())
	cancel()
	ticket.stopWaiting()
	if err != nil {
		switch {
		case errors.Is(err, gpu.ErrNoEngine):
			return writeImageError(w, e, httpapi.Error{Status: http.StatusServiceUnavailable, Code: "gpu_busy",
				Message: fmt.Sprintf("gpu_turnstile: %v; a config reload removed the engine while the job waited", err)})
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			return ts.imageWaitedTooLong(w, r, c, e)
		}
		return clientGone("after waiting %v for the GPU", time.Since(start).Round(time.Millisecond))
	}
	// From here on every path ends the job, which gives the lock back.
	c = ts.cfg()
	if err := job.Prepare(); err != nil {
		if jsonhttp.Refused(err) {
			ts.log().Error("image engine not reachable as the job was readied; answered the client in its API's shape",
				zap.String("engine", e.Name()), zap.Error(err))
			return writeImageError(w, e, httpapi.EngineDown(false, e.Name(), e.Kind()))
		}
		return writeImageError(w, e, httpapi.Error{Status: http.StatusServiceUnavailable, Code: "gpu_busy",
			Message: fmt.Sprintf("gpu_turnstile: %v; image job refused so that the GPU is not shared", err)})
	}
	if r.Context().Err() != nil {
		job.End("cancelled")
		return clientGone("while the LLM engines were emptied")
	}
	if job.Submitting() != nil {
		return writeImageError(w, e, httpapi.CancelledBeforeSent(e.Name()))
	}
	if e.Synchronous() {
		return ts.serveSyncJob(w, r, next, c, job)
	}
	return ts.serveQueuedJob(w, r, next, c, job)
}

// imageWaitedTooLong answers an image job whose wait, its body's reading
// included, reached image_wait_timeout: 503 in the engine's error shape
// with Retry-After, on a connection that then closes. Nothing was sent to
// the engine.
func (ts *turnstile) imageWaitedTooLong(w http.ResponseWriter, r *http.Request, c *config, e gpu.ImageEngine) error {
	ts.metrics.busyTimeout.Inc()
	ts.log().Warn("image job waited image_wait_timeout for the GPU; answered busy",
		zap.Duration("image_wait_timeout", c.ImageWait), zap.String("engine", e.Name()), zap.String("path", r.URL.Path))
	retry := retryAfterSeconds(ts.retryAfter(c))
	admit.CloseAfter(w, r)
	return writeImageError(w, e, httpapi.Error{Status: http.StatusServiceUnavailable, Code: "gpu_busy", RetryAfter: retry,
		Message: fmt.Sprintf("gpu_turnstile: waited %v (image_wait_timeout) for the GPU, busy (%s); nothing was sent to %s; retry after %ds",
			c.ImageWait, ts.lock.State(), e.Name(), retry)})
}

// serveQueuedJob forwards a job to an engine that queues it (ComfyUI)
// and, once its prompt_id is read, leaves the GPU to the job's watch.
// The forward is detached from the client: if the client goes away once
// ComfyUI has the prompt, ComfyUI queues the job anyway, and its
// prompt_id must still be read so the GPU is held for it.
func (ts *turnstile) serveQueuedJob(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, c *config, job *gpu.ImageJob) error {
	e := job.Engine()
	sctx, span := ts.startSubmit(r, e)
	fctx, cancel := context.WithTimeout(sctx, c.GPU.JobTimeout)
	defer cancel()
	cw := newCaptureWriter(w, c.CaptureLimit)
	returned := false
	defer func() {
		if !returned {
			endAborted(job, span, cw)
		}
	}()
	err := next.ServeHTTP(cw, r.WithContext(fctx))
	returned = true
	id, found := comfy.PromptID(cw.body)
	queued := err == nil && cw.ok() && found
	endSubmit(span, e, queued, id, cw.status, err)
	if !queued {
		outcome := "rejected"
		if err != nil {
			outcome = "failed"
		}
		job.End(outcome)
		if log := ts.log(); log.Core().Enabled(zap.DebugLevel) {
			log.Debug("image request ended without a job", zap.Int("status", cw.status), zap.Bool("prompt_id", found), zap.Error(err))
		}
		return err
	}
	job.Submitted(id)
	return nil
}

// serveWithoutEngine serves an image route of a kind the turnstile has no
// engine of. A1111's routes may be served by an LLM engine (llama-swap
// runs stable-diffusion.cpp behind them): then they are LLM work.
// ComfyUI's pass through.
func (h *Handler) serveWithoutEngine(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, c *config) error {
	if h.imageRouteIsLLM(c, r) {
		return h.serveLLM(w, r, next)
	}
	return next.ServeHTTP(w, r)
}

// imageRouteIsLLM reports whether an image route with no engine of its
// kind is LLM work: A1111's, when the turnstile has LLM engines.
func (h *Handler) imageRouteIsLLM(c *config, r *http.Request) bool {
	return h.class == classAuto && imageKind(cleanPath(r)) == "a1111" && len(c.GPU.LLMs) > 0
}

// serveSyncJob forwards a job whose answer comes at its end (A1111),
// detached from the client: the engine runs the job to its end whether the
// client stays or not, and the GPU is the job's until then. job_timeout
// bounds it; past it, the job is interrupted.
func (ts *turnstile) serveSyncJob(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, c *config, job *gpu.ImageJob) error {
	sctx, span := ts.startSubmit(r, job.Engine())
	fctx, cancel := context.WithTimeout(sctx, c.GPU.JobTimeout)
	defer cancel()
	rec := newCaptureWriter(w, 0) // for its status
	returned := false
	defer func() {
		if !returned {
			endAborted(job, span, rec)
		}
	}()
	err := next.ServeHTTP(rec, r.WithContext(fctx))
	returned = true
	outcome := "success"
	switch {
	case fctx.Err() != nil:
		outcome = "timeout"
	case err != nil || rec.status >= 500:
		outcome = "failed"
	case rec.status >= 400:
		outcome = "rejected"
	}
	endSyncSubmit(span, outcome, err)
	job.Ran(outcome)
	return err
}

// errAnswerCut is the error of a forward whose answer could not be copied
// to the client.
var errAnswerCut = errors.New("the engine's answer was cut short on its way to the client")

// endAborted ends a job whose forward did not return: reverse_proxy
// panics with http.ErrAbortHandler when the answer cannot be copied to
// a client that has gone (the image of a long render, to a closed tab),
// and the panic goes on up to Caddy after this. The engine has the work
// all the same: a queued job whose prompt_id was read is held for, a
// synchronous one (whose answer comes at its end, status 200 once done)
// is drained; either way the GPU is given back once the engine is idle.
func endAborted(job *gpu.ImageJob, span trace.Span, cw *captureWriter) {
	e := job.Engine()
	if e.Synchronous() {
		outcome := "failed"
		if cw.status == http.StatusOK {
			outcome = "success" // made, if not delivered
		}
		endSyncSubmit(span, outcome, errAnswerCut)
		job.Ran(outcome)
		return
	}
	if id, found := comfy.PromptID(cw.body); found {
		endSubmit(span, e, true, id, cw.status, nil)
		job.Submitted(id)
		return
	}
	endSubmit(span, e, false, "", cw.status, errAnswerCut)
	job.End("failed")
}

// writeImageError answers err in the image engine's error shape.
func writeImageError(w http.ResponseWriter, e gpu.ImageEngine, err httpapi.Error) error {
	httpapi.Write(w, httpapi.ShapeOf("", e.Kind()), err)
	return nil
}

// imageEngine is the engine an image request goes to: the handler's
// `engine`, or else the first engine of the kind its route belongs to
// (the first image engine for a route of none, with an explicit class).
// Nil if the turnstile has no such engine.
func (h *Handler) imageEngine(c *config, r *http.Request) gpu.ImageEngine {
	if h.Engine != "" {
		return imageEngineNamed(c, h.Engine)
	}
	kind := imageKind(cleanPath(r))
	for _, e := range c.GPU.Images {
		if e.Kind() == kind {
			return e
		}
	}
	if kind == "" && h.class == classImage && len(c.GPU.Images) > 0 {
		return c.GPU.Images[0]
	}
	return nil
}

func imageEngineNamed(c *config, name string) gpu.ImageEngine {
	for _, e := range c.GPU.Images {
		if e.Name() == name {
			return e
		}
	}
	return nil
}
