package turnstile

import (
	"time"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

// answers are the busy and refusal answers of c's handlers.
func (ts *turnstile) answers(c *config) httpapi.Answers {
	return httpapi.Answers{
		BusyStatus: c.BusyStatus, LLMWait: c.LLMWait, ImageWait: c.ImageWait,
		Limits:     c.Limits(0, ts.log()),
		RetryAfter: func() int { return httpapi.Seconds(ts.retryAfter(c)) },
		State:      func() string { return ts.gpu.State().String() },
		Log:        ts.log(),
		ImageRetryAfter: func() int {
			return httpapi.Seconds(ts.gpu.ImageRetryAfter(c.BusyRetryAfterAuto, c.RetryAfter, tcfg.DefaultBusyRetryAfter))
		},
		Outlook: func() string { return ts.gpu.Outlook(false).Words() },
	}
}

// retryAfter is the Retry-After of a busy answer (gpu.RetryAfter).
func (ts *turnstile) retryAfter(c *config) time.Duration {
	return ts.gpu.RetryAfter(c.BusyRetryAfterAuto, c.RetryAfter, tcfg.DefaultBusyRetryAfter)
}
