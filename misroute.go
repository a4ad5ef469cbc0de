package turnstile

import (
	"net/http"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

// checkRoute looks, once next has returned, at where reverse_proxy sent a
// request this handler guarded (route.Guard): an upstream that is none of
// the turnstile's engines is counted, logged once per config, and named
// in the status. The first requests after a load are all checked, then a
// sample (route.Sampler), which spares the LLM fast path.
func (h *Handler) checkRoute(r *http.Request) {
	if !h.sampler.Due() || h.guard == nil { // no guard: a handler made outside a config load, in tests
		return
	}
	hostport := httpapi.Upstream(r)
	if hostport == "" {
		return // not proxied: answered before, or by another handler
	}
	misrouted, first := h.guard.Check(hostport)
	if !misrouted {
		return
	}
	h.ts.metrics.Misrouted.Inc()
	if first {
		h.ts.log().Error("a guarded request was proxied to an upstream that is none of the turnstile's engines: the GPU may be shared unseen; proxy to the engine's URL (gpu_turnstile_proxy does)",
			zap.String("upstream", hostport), zap.Strings("engines", h.ts.cfg().EngineSummary()), zap.String("path", r.URL.Path))
	}
}

// checkImageRoute is checkRoute for an image route, which this handler
// guarded only if the turnstile has an engine for it (or serves it as
// LLM work).
func (h *Handler) checkImageRoute(r *http.Request) {
	if c := h.ts.cfg(); h.imageEngine(c, r) != nil || h.imageRouteIsLLM(c, r) {
		h.checkRoute(r)
	}
}
