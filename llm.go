package turnstile

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// serveLLM serves a request that shares the GPU with other LLM requests:
// at once if the GPU is free for LLM use (no buffering, no allocation),
// else as gpu.ServeLLM decides. With vram_admission the model a request
// names is read first, so it always takes gpu.ServeLLM's path.
func (h *Handler) serveLLM(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	ts := h.ts
	c := ts.cfg()
	if c.GPU.Memory == nil && ts.gpu.TryLLM() {
		ts.metrics.waitLLM.Observe(0)
		return ts.forwardLLM(w, r, next)
	}
	served := ts.gpu.ServeLLM(r.Context(), gpu.LLMRun{
		Reject: c.Reject, Wait: c.LLMWait, Arrival: admit.Arrival(r), DuringJob: h.DuringJob != "",
		Body: &admit.LLMBody{Budget: &ts.budget, Limits: c.Limits(admit.LLMBodyLimit, ts.log()), W: w, R: r},
		Forward: func(a *gpu.Answered) error {
			if a == nil {
				return next.ServeHTTP(w, r)
			}
			out := &admit.Outcome{ResponseWriter: w}
			defer func() { a.Status, a.Head = out.Result() }()
			return next.ServeHTTP(out, r)
		},
	})
	if served.Answer == gpu.LLMDuringJob && h.DuringJob == "allow" {
		ts.log().Info("LLM request let through during an image job (during_job allow)", zap.String("path", r.URL.Path))
		return next.ServeHTTP(w, r)
	}
	reason, err := ts.answers(c).LLM(w, r, served)
	ts.metrics.busy(reason)
	return err
}

// forwardLLM is the fast path's forward: next with the shared place
// TryLLM took, given back however next ends. reverse_proxy aborts the
// handler with a panic when the answer cannot be copied to a client that
// has gone: that too is an abnormal end, after which the next emptying
// of the LLM engines is confirmed more strictly.
func (ts *turnstile) forwardLLM(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	returned := false
	defer func() {
		if !returned {
			ts.gpu.NoteLLMEnd(r.Context(), gpu.ErrAnswerCut)
		}
		ts.gpu.ReleaseLLM()
	}()
	err := next.ServeHTTP(w, r)
	returned = true
	ts.gpu.NoteLLMEnd(r.Context(), err)
	return err
}
