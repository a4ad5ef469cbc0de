package turnstile

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/notice"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// serveLLM serves a request that shares the GPU with other LLM requests:
// at once if the GPU is free for LLM use (no buffering, no allocation),
// else as gpu.ServeLLM decides. With vram_admission the model a request
// names is read first, so it always takes gpu.ServeLLM's path.
func (h *Handler) serveLLM(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	ts := h.ts
	c := ts.cfg()
	if c.GPU.Memory == nil && ts.gpu.TryLLM() {
		ts.metrics.WaitLLM.Observe(0)
		return ts.forwardLLM(w, r, next)
	}
	return h.waitLLM(w, r, next, c)
}

// waitLLM is serveLLM's path for a request that did not find the GPU
// free at once. With wait_notice, a streaming chat request that waits is
// sent notices (internal/notice) from when it starts to wait; after them
// everything is written through the notices' writer, and a refusal or a
// failure becomes the stream's last chunk.
func (h *Handler) waitLLM(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, c *config) error {
	ts := h.ts
	call := &admit.LLMForward{Next: next, LLMBody: admit.LLMBody{Budget: &ts.budget, Limits: c.Limits(admit.LLMBodyLimit, ts.log()), W: w, R: r}}
	arrival := admit.Arrival(r)
	run := gpu.LLMRun{
		Reject: c.Reject, Wait: c.LLMWait, Arrival: arrival, DuringJob: h.DuringJob != "",
		Body: &call.LLMBody, Forward: call,
	}
	if every := h.noticeEvery(c); every > 0 {
		if shape, ok := notice.For(route.CleanPath(r)); ok {
			run.Waiting = func(memory func() string) func(bool) {
				var src notice.Source = ts.gpu
				if memory != nil {
					src = notice.ForMemory(ts.gpu, memory)
				}
				if call.Notice = notice.Start(w, shape, call.Whole(), every, src, arrival); call.Notice == nil {
					return nil
				}
				return call.Notice.Waited
			}
		}
	}
	served := ts.gpu.ServeLLM(r.Context(), run)
	if served.Answer == gpu.LLMDuringJob && h.DuringJob == "allow" {
		ts.log().Info("LLM request let through during an image job (during_job allow)", zap.String("path", r.URL.Path))
		return next.ServeHTTP(w, r)
	}
	reason, err := "", served.Err
	if served.Answer != gpu.LLMForwarded {
		reason, err = ts.answers(c).LLM(call.Out(), r, served)
	}
	ts.metrics.Busy(reason)
	if n := call.Notice; n != nil {
		return n.Finish(h.answerFailedForward(n.Writer(), r, route.LLM, err))
	}
	return err
}

// noticeEvery is the interval of wait_notice for this handler's requests
// (0: off): its own, else its turnstile's.
func (h *Handler) noticeEvery(c *config) time.Duration {
	if h.noticeSet {
		return h.notice
	}
	return c.WaitNotice
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
