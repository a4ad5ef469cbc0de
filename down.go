package turnstile

import (
	"net/http"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// answerFailedForward answers a request whose forward failed before
// anything was sent (httpapi.AnswerEngineDown), and records a forward
// that was answered as a contact. Any other outcome is returned as it
// is.
func (h *Handler) answerFailedForward(w http.ResponseWriter, r *http.Request, c route.Class, err error) error {
	if err == nil {
		// An answer is a contact: the engine it came from is reachable
		// again. Looked up only while one is not (one atomic load).
		if h.ts.gpu.Unreached() {
			h.ts.gpu.NoteForwarded(httpapi.Upstream(r))
		}
		return nil
	}
	return h.answerEngineDown(w, r, c, err)
}

// answerEngineDown is answerFailedForward's for an error, apart so that
// the path without one allocates nothing.
func (h *Handler) answerEngineDown(w http.ResponseWriter, r *http.Request, c route.Class, err error) error {
	engine := func() gpu.Engine { return h.engineOf(r, c) }
	return httpapi.AnswerEngineDown(w, r, err, engine, h.ts.gpu.NoteUnreachable, h.ts.log())
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
