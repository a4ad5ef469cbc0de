package turnstile

import (
	"net/http"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// answerFailedForward answers a request whose forward failed before
// anything was sent (httpapi.ForwardFailed) in its route's error shape,
// naming the engine. An engine that could not be reached counts as
// unreachable at once (gpu.Ready). Any other outcome is returned as it is.
func (h *Handler) answerFailedForward(w http.ResponseWriter, r *http.Request, c route.Class, err error) error {
	if err == nil {
		return nil
	}
	return h.answerEngineDown(w, r, c, err)
}

// answerEngineDown is answerFailedForward's for an error, apart so that
// the path without one allocates nothing.
func (h *Handler) answerEngineDown(w http.ResponseWriter, r *http.Request, c route.Class, err error) error {
	he, ok := httpapi.ForwardFailed(err)
	if !ok {
		return err
	}
	var name, kind string
	if e := h.engineOf(r, c); e != nil {
		name, kind = e.Name(), e.Kind()
		if he.StatusCode != http.StatusGatewayTimeout {
			h.ts.gpu.NoteUnreachable(name, he.Err)
		}
	}
	httpapi.WriteEngineDown(w, r, route.CleanPath(r), he, name, kind, h.ts.log())
	return nil
}

// engineOf is the engine a request of class c went to (httpapi.EngineOf).
func (h *Handler) engineOf(r *http.Request, c route.Class) gpu.Engine {
	cfg := h.ts.cfg()
	if cfg == nil {
		return nil
	}
	var image gpu.Engine
	if c == route.Image {
		image = h.imageEngine(cfg, r)
	}
	return httpapi.EngineOf(r, &cfg.GPU, image, c == route.LLM)
}
