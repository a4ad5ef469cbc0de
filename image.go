package turnstile

import (
	"context"
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

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
	ticket, err := ts.budget.Admit(w, r, c.Limits(admit.ImageBodyLimit, ts.log()), deadline)
	if err == nil {
		// Its run time is learned under it (the waiters' expected starts),
		// and its memory peak when co_resident models may run beside jobs.
		workflow := ticket.Workflow(e.Kind(), route.CleanPath(r))
		defer ticket.Done()
		_, err = ts.gpu.RunImage(gpu.WithWaiter(r.Context(), ticket.Waiter(r, false)), gpu.ImageRun{
			Engine: e.Name(), Deadline: deadline, Waited: ticket.StopWaiting, Workflow: workflow,
			Forward: func(ctx context.Context, f *gpu.Forwarded) {
				admit.Forward(ctx, w, r, next, f, c.CaptureLimitOf(e.Synchronous()), kinds.JobID(e.Kind()))
			},
		})
	}
	reason, err := ts.answers(c).Image(w, r, e, err, deadline)
	ts.metrics.Busy(reason)
	return err
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
	return h.class == route.Auto && tcfg.Routes.ServedAsLLM(route.CleanPath(r)) && len(c.GPU.LLMs) > 0
}

// imageEngine is the engine an image request goes to (route.ImageEngine):
// the handler's `engine`, or else the first of its route's kind.
func (h *Handler) imageEngine(c *config, r *http.Request) gpu.ImageEngine {
	return route.ImageEngine(c.GPU.Images, h.Engine, tcfg.Routes.ImageKind(route.CleanPath(r)), h.class == route.Image)
}
