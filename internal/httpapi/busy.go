package httpapi

import (
	"fmt"
	"net/http"
	"time"
)

// The answers of the request path to requests that do not get the GPU, in
// any API's shape (Write).

// Busy is the answer to an LLM request that cannot have the GPU now:
// status is llm_busy_status, cause what holds the GPU (an image job, an
// external hold), waited how long it waited for it (0 if it did not), and
// retry its Retry-After in seconds.
func Busy(status int, cause string, waited time.Duration, retry int) Error {
	msg := fmt.Sprintf("gpu_turnstile: the GPU is busy with %s; retry after %ds", cause, retry)
	if waited > 0 {
		msg = fmt.Sprintf("gpu_turnstile: waited %v for the GPU, busy with %s; retry after %ds", waited, cause, retry)
	}
	return Error{Status: status, Code: "gpu_busy", Message: msg, RetryAfter: retry}
}

// ImageBusy is the answer to an image job that waited image_wait_timeout
// (waited) for the GPU, held as state says, and was not sent to engine.
func ImageBusy(waited time.Duration, state, engine string, retry int) Error {
	return Error{Status: http.StatusServiceUnavailable, Code: "gpu_busy", RetryAfter: retry,
		Message: fmt.Sprintf("gpu_turnstile: waited %v (image_wait_timeout) for the GPU, busy (%s); nothing was sent to %s; retry after %ds",
			waited, state, engine, retry)}
}

// DuringJob is the answer to an LLM request made from within a running
// image job, with during_job reject.
func DuringJob() Error {
	return Error{Status: http.StatusConflict, Code: "gpu_deadlock",
		Message: "gpu_turnstile: this LLM request comes from within a running image job and would wait for that job to end, which waits for it: refused (during_job reject)"}
}

// JobRefused is the answer to an image job that the GPU could not be
// readied for (err says why) or, with reloaded, whose engine a config
// reload removed while it waited.
func JobRefused(err error, reloaded bool) Error {
	why := "image job refused so that the GPU is not shared"
	if reloaded {
		why = "a config reload removed the engine while the job waited"
	}
	return Error{Status: http.StatusServiceUnavailable, Code: "gpu_busy", Message: fmt.Sprintf("gpu_turnstile: %v; %s", err, why)}
}
