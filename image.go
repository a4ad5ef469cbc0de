package turnstile

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// imageBodyLimit bounds how much of a /prompt body is read into memory
// before it waits (workflows are JSON graphs, rarely over a few MiB);
// within wait_buffer_limit, like LLM bodies.
const imageBodyLimit = 32 << 20

// serveImage serves an image job (gpu.RunImage): it takes the GPU alone,
// and keeps it until the job has ended.
func (h *Handler) serveImage(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	ts := h.ts
	c := ts.cfg()
	e := h.imageEngine(c, r)
	if e == nil {
		return h.serveWithoutEngine(w, r, next, c)
	}
	deadline := admit.Arrival(r).Add(c.ImageWait)
	ticket, err := ts.budget.Admit(w, r, ts.limits(c, imageBodyLimit), deadline)
	if err != nil {
		return ts.notAdmitted(w, r, c, e, err, deadline)
	}
	defer ticket.Done()
	_, err = ts.RunImage(gpu.WithWaiter(r.Context(), ticket.Waiter(r, false)), gpu.ImageRun{
		Engine: e.Name(), Deadline: deadline, Waited: ticket.StopWaiting,
		Forward: func(ctx context.Context, f *gpu.Forwarded) {
			admit.Forward(ctx, w, r, next, f, ts.captureLimit(e))
		},
	})
	return ts.answerImage(w, r, c, e, err)
}

// answerImage answers an image request as RunImage ended it.
func (ts *turnstile) answerImage(w http.ResponseWriter, r *http.Request, c *config, e gpu.ImageEngine, err error) error {
	var refused *gpu.RefusedError
	switch {
	case errors.Is(err, gpu.ErrNoEngine):
		return writeImageError(w, e, httpapi.Error{Status: http.StatusServiceUnavailable, Code: "gpu_busy",
			Message: fmt.Sprintf("gpu_turnstile: %v; a config reload removed the engine while the job waited", err)})
	case errors.Is(err, gpu.ErrCancelledBeforeSent):
		return writeImageError(w, e, httpapi.CancelledBeforeSent(e.Name()))
	case errors.As(err, &refused) && jsonhttp.Refused(err):
		ts.log().Error("image engine not reachable as the job was readied; answered the client in its API's shape",
			zap.String("engine", e.Name()), zap.Error(err))
		return writeImageError(w, e, httpapi.EngineDown(false, e.Name(), e.Kind()))
	case refused != nil:
		return writeImageError(w, e, httpapi.Error{Status: http.StatusServiceUnavailable, Code: "gpu_busy",
			Message: fmt.Sprintf("gpu_turnstile: %v; image job refused so that the GPU is not shared", err)})
	}
	return ts.notAdmitted(w, r, c, e, err, time.Time{})
}

// captureLimit is how much of e's answer to a job is kept to read its
// prompt_id: none for a synchronous engine, whose status is enough.
func (ts *turnstile) captureLimit(e gpu.ImageEngine) int64 {
	if e.Synchronous() {
		return 0
	}
	return ts.cfg().CaptureLimit
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
			c.ImageWait, ts.State(), e.Name(), retry)})
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
// kind is LLM work: one an LLM kind serves (A1111's, on llama-swap), when
// the turnstile has LLM engines.
func (h *Handler) imageRouteIsLLM(c *config, r *http.Request) bool {
	return h.class == classAuto && tcfg.Routes.ServedAsLLM(cleanPath(r)) && len(c.GPU.LLMs) > 0
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
