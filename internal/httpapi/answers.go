package httpapi

import (
	"errors"
	"math"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// The reasons of busy answers: the label of gpu_turnstile_busy_total.
const (
	BusyReject   = "reject"   // reject mode
	BusyTimeout  = "timeout"  // the wait reached its timeout
	BusyOverload = "overload" // wait_buffer_limit or max_waiting
	BusyVRAM     = "vram"     // too little video memory for the model
)

// Answers answers the requests of one turnstile's handler that were not
// sent on, in the error shape of the API each spoke, as its running
// config says. Each method returns the reason its answer counts under
// (Busy*; "" for none) and the error for Caddy to answer, if any.
type Answers struct {
	BusyStatus         int           // llm_busy_status
	LLMWait, ImageWait time.Duration // llm_wait_timeout, image_wait_timeout
	Limits             admit.Limits  // the wait budget's, named when one turns a request away
	// RetryAfter is the Retry-After of a busy answer in seconds; State
	// what the GPU is used for: both read only when an answer needs them.
	RetryAfter func() int
	State      func() string
	// ImageRetryAfter is RetryAfter for an image job, if it differs.
	ImageRetryAfter func() int
	// Outlook, if set, says in words what an LLM request arriving now
	// can expect ("you would be 2nd in line, expected to start in about
	// 40 s"), "" if nothing: a busy answer's message adds it.
	Outlook func() string
	Log     *zap.Logger
}

// LLM answers an LLM request as gpu.ServeLLM ended it: busy in reject
// mode, busy for lack of video memory, refused from within the running
// image job (during_job reject), or not admitted (NotAdmitted). A
// forwarded request's error is returned as it is.
func (a Answers) LLM(w http.ResponseWriter, r *http.Request, s gpu.LLMServed) (string, error) {
	switch s.Answer {
	case gpu.LLMForwarded:
		return "", s.Err
	case gpu.LLMBusy:
		a.writeBusy(w, r, a.withOutlook(s.Cause), 0)
		return BusyReject, nil
	case gpu.LLMNoMemory:
		if s.Waited > 0 {
			admit.CloseAfter(w, r)
		}
		a.writeBusy(w, r, s.Cause, s.Waited)
		return BusyVRAM, nil
	case gpu.LLMDuringJob:
		Write(w, ShapeOf(route.CleanPath(r), ""), DuringJob())
		return "", nil
	}
	return a.notAdmitted(w, r, nil, s.Err, s.Deadline, s.Cause)
}

// Image answers an image job to engine e that err (from the wait
// budget's Admit, or gpu.RunImage) ended before or as it was sent: refused
// (ImageRefusal) in the engine's error shape, or not admitted. deadline
// is the end of its wait, by which a refused body is drained.
func (a Answers) Image(w http.ResponseWriter, r *http.Request, e gpu.ImageEngine, err error, deadline time.Time) (string, error) {
	ans, down, ok := ImageRefusal(err, e)
	if !ok {
		return a.notAdmitted(w, r, e, err, deadline, "")
	}
	if down {
		a.Log.Error("image engine not reachable as the job was readied; answered the client in its API's shape",
			zap.String("engine", e.Name()), zap.Error(err))
	}
	return "", WriteImage(w, e, ans)
}

// notAdmitted answers a request that did not get the GPU (image, nil for
// an LLM request, which cause kept off it): its wait, its body's reading
// included, reached the deadline; its client went away; or a limit of the
// wait budget turned it away. That last is answered busy at once, in the
// error shape of the API it spoke, with Retry-After: an LLM request as in
// reject mode (llm_busy_status), an image job in its engine's error shape
// with 503. Any other error (an unreadable body) is returned for Caddy to
// answer.
func (a Answers) notAdmitted(w http.ResponseWriter, r *http.Request, image gpu.ImageEngine, err error, deadline time.Time, cause string) (string, error) {
	var gone *gpu.ClientGoneError
	var o *admit.OverloadError
	switch {
	case errors.Is(err, admit.ErrLate) || errors.Is(err, gpu.ErrWaitTimeout):
		if image != nil {
			a.imageWaitedTooLong(w, r, image)
		} else {
			a.waitedTooLong(w, r, cause)
		}
		return BusyTimeout, nil
	case errors.As(err, &gone):
		return "", admit.ClientGone(gone.While)
	case !errors.As(err, &o):
		return "", err
	}
	o.Drain(w, r, deadline)
	retry := a.RetryAfter()
	if image != nil {
		retry = a.imageRetryAfter()
	}
	busy := Error{Status: a.BusyStatus, Code: "gpu_busy", Message: o.Message(a.Limits, retry), RetryAfter: retry}
	if image != nil {
		busy.Status = http.StatusServiceUnavailable
		WriteImage(w, image, busy)
	} else {
		Write(w, ShapeOf(route.CleanPath(r), ""), busy)
	}
	return BusyOverload, nil
}

// waitedTooLong answers an LLM request whose wait, its body's reading
// included, reached llm_wait_timeout, on a connection that then closes:
// a body cut short leaves the rest of it unread.
func (a Answers) waitedTooLong(w http.ResponseWriter, r *http.Request, cause string) {
	a.Log.Warn("LLM request waited llm_wait_timeout for the GPU; answered busy",
		zap.Duration("llm_wait_timeout", a.LLMWait), zap.String("path", r.URL.Path))
	admit.CloseAfter(w, r)
	a.writeBusy(w, r, a.withOutlook(cause), a.LLMWait)
}

// imageWaitedTooLong answers an image job whose wait, its body's reading
// included, reached image_wait_timeout: 503 in the engine's error shape
// with Retry-After, on a connection that then closes. Nothing was sent to
// the engine.
func (a Answers) imageWaitedTooLong(w http.ResponseWriter, r *http.Request, e gpu.ImageEngine) {
	a.Log.Warn("image job waited image_wait_timeout for the GPU; answered busy",
		zap.Duration("image_wait_timeout", a.ImageWait), zap.String("engine", e.Name()), zap.String("path", r.URL.Path))
	admit.CloseAfter(w, r)
	WriteImage(w, e, ImageBusy(a.ImageWait, a.State(), e.Name(), a.imageRetryAfter()))
}

// writeBusy answers an LLM request that cannot have the GPU now (cause
// says why), in the error format of the API the client spoke, with
// Retry-After; waited is how long it waited (0 if it did not).
func (a Answers) writeBusy(w http.ResponseWriter, r *http.Request, cause string, waited time.Duration) {
	Write(w, ShapeOf(route.CleanPath(r), ""), Busy(a.BusyStatus, cause, waited, a.RetryAfter()))
}

// withOutlook is cause with what an LLM request arriving now can expect,
// if that is known: "an image job; you would be 2nd in line, expected to
// start in about 40 s".
func (a Answers) withOutlook(cause string) string {
	if a.Outlook == nil {
		return cause
	}
	if o := a.Outlook(); o != "" {
		return cause + "; " + o
	}
	return cause
}

// imageRetryAfter is the Retry-After of a busy answer to an image job.
func (a Answers) imageRetryAfter() int {
	if a.ImageRetryAfter != nil {
		return a.ImageRetryAfter()
	}
	return a.RetryAfter()
}

// Seconds is a Retry-After in whole seconds, at least 1.
func Seconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
