package turnstile

import (
	"errors"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

// answerFailedForward answers a request whose forward failed before
// anything was sent (reverse_proxy's 502, 503 or 504: the engine could not
// be reached or did not answer in time) in its route's error shape,
// naming the engine; the address goes to the log. An engine that could
// not be reached counts as unreachable at once (gpu.Ready). Any other
// outcome is returned as it is.
//
// reverse_proxy returns an error only before it has written anything:
// once the engine's answer has begun, a failure aborts the handler with
// http.ErrAbortHandler instead. Caddy's own error handling relies on that
// too when it writes the error's status, so no writer is wrapped to find
// out, which keeps the fast path as it was.
func (h *Handler) answerFailedForward(w http.ResponseWriter, r *http.Request, c class, err error) error {
	if err == nil {
		return nil
	}
	return h.answerEngineDown(w, r, c, err)
}

// answerEngineDown is answerFailedForward's for an error, apart so that
// the path without one allocates nothing.
func (h *Handler) answerEngineDown(w http.ResponseWriter, r *http.Request, c class, err error) error {
	var he caddyhttp.HandlerError
	if !errors.As(err, &he) ||
		(he.StatusCode != http.StatusBadGateway && he.StatusCode != http.StatusServiceUnavailable && he.StatusCode != http.StatusGatewayTimeout) {
		return err
	}
	e := h.engineOf(r, c)
	var name, kind string
	if e != nil {
		name, kind = e.Name(), e.Kind()
	}
	timeout := he.StatusCode == http.StatusGatewayTimeout
	if e != nil && !timeout {
		h.ts.NoteUnreachable(name, he.Err)
	}
	down := httpapi.EngineDown(timeout, name, kind)
	h.ts.log().Error("engine not reachable through reverse_proxy; answered the client in its API's shape",
		zap.String("engine", name), zap.String("upstream", upstreamHostport(r)), zap.String("path", r.URL.Path),
		zap.Int("status", down.Status), zap.Error(he.Err))
	httpapi.Write(w, httpapi.ShapeOf(cleanPath(r), kind), down)
	return nil
}

// engineOf is the engine a request of class c went to: an image job's
// own, else the one reverse_proxy dialled, else the one its route
// belongs to.
func (h *Handler) engineOf(r *http.Request, c class) gpu.Engine {
	cfg := h.ts.cfg()
	if cfg == nil {
		return nil
	}
	if c == classImage {
		if e := h.imageEngine(cfg, r); e != nil {
			return e
		}
	}
	p := cleanPath(r)
	return cfg.GPU.EngineFor(upstreamHostport(r), httpapi.RouteKind(p), c == classLLM || strings.HasPrefix(p, "/v1/"))
}

// upstreamHostport is the upstream reverse_proxy dialled for r, or "".
func upstreamHostport(r *http.Request) string {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return ""
	}
	s, _ := repl.GetString("http.reverse_proxy.upstream.hostport")
	return s
}
