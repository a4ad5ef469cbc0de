package turnstile

import (
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// notAdmitted answers a request that did not get the GPU (image, nil for
// an LLM request): its wait, its body's reading included, reached the
// deadline; its client went away; or a limit of the wait budget turned it
// away. That last is answered busy at once, in the error shape of the API
// it spoke, with Retry-After: an LLM request as in reject mode
// (llm_busy_status), an image job in its engine's error shape with 503.
// Any other error (an unreadable body) is returned for Caddy to answer.
func (ts *turnstile) notAdmitted(w http.ResponseWriter, r *http.Request, c *config, image gpu.ImageEngine, err error, deadline time.Time) error {
	var gone *gpu.ClientGoneError
	var o *admit.OverloadError
	switch {
	case errors.Is(err, admit.ErrLate) || errors.Is(err, gpu.ErrWaitTimeout):
		if image != nil {
			return ts.imageWaitedTooLong(w, r, c, image)
		}
		return ts.waitedTooLong(w, r, c)
	case errors.As(err, &gone):
		return admit.ClientGone(gone.While)
	case !errors.As(err, &o):
		return err
	}
	ts.metrics.busyOverload.Inc()
	o.Drain(w, r, deadline)
	retry := retryAfterSeconds(ts.retryAfter(c))
	busy := httpapi.Error{Status: c.BusyStatus, Code: "gpu_busy", Message: o.Message(c.Limits(0, ts.log()), retry), RetryAfter: retry}
	if image != nil {
		busy.Status = http.StatusServiceUnavailable
		return httpapi.WriteImage(w, image, busy)
	}
	httpapi.Write(w, httpapi.ShapeOf(route.CleanPath(r), ""), busy)
	return nil
}

// waitedTooLong answers an LLM request whose wait, its body's reading
// included, reached llm_wait_timeout, on a connection that then closes:
// a body cut short leaves the rest of it unread.
func (ts *turnstile) waitedTooLong(w http.ResponseWriter, r *http.Request, c *config) error {
	ts.metrics.busyTimeout.Inc()
	ts.log().Warn("LLM request waited llm_wait_timeout for the GPU; answered busy",
		zap.Duration("llm_wait_timeout", c.LLMWait), zap.String("path", r.URL.Path))
	admit.CloseAfter(w, r)
	return ts.writeBusy(w, r, c, c.LLMWait)
}

// imageWaitedTooLong answers an image job whose wait, its body's reading
// included, reached image_wait_timeout: 503 in the engine's error shape
// with Retry-After, on a connection that then closes. Nothing was sent to
// the engine.
func (ts *turnstile) imageWaitedTooLong(w http.ResponseWriter, r *http.Request, c *config, e gpu.ImageEngine) error {
	ts.metrics.busyTimeout.Inc()
	ts.log().Warn("image job waited image_wait_timeout for the GPU; answered busy",
		zap.Duration("image_wait_timeout", c.ImageWait), zap.String("engine", e.Name()), zap.String("path", r.URL.Path))
	admit.CloseAfter(w, r)
	return httpapi.WriteImage(w, e, httpapi.ImageBusy(c.ImageWait, ts.State().String(), e.Name(), retryAfterSeconds(ts.retryAfter(c))))
}

// writeBusy answers an LLM request that cannot have the GPU now, in the
// error format of the API the client spoke, with Retry-After; waited is
// how long it waited (0 if it did not).
func (ts *turnstile) writeBusy(w http.ResponseWriter, r *http.Request, c *config, waited time.Duration) error {
	busy := httpapi.Busy(c.BusyStatus, ts.BusyCause(), waited, retryAfterSeconds(ts.retryAfter(c)))
	httpapi.Write(w, httpapi.ShapeOf(route.CleanPath(r), ""), busy)
	return nil
}

// retryAfter is the Retry-After of a busy answer (gpu.RetryAfter).
func (ts *turnstile) retryAfter(c *config) time.Duration {
	return ts.GPU.RetryAfter(c.BusyRetryAfterAuto, c.RetryAfter, tcfg.DefaultBusyRetryAfter)
}
