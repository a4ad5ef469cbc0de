package turnstile

import (
	"errors"
	"net/http"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// cancelJob cancels ts's running image job and answers, once its engine
// has shown the job's end, 200 {"prompt_id","engine","outcome"}. It
// serves the admin route DELETE /gpu_turnstile/job and the status
// handler's DELETE ?view=job; errors are caddy.APIError values.
func cancelJob(w http.ResponseWriter, r *http.Request, ts *turnstile) error {
	res, err := ts.CancelJob(r.Context())
	if err == nil {
		return writeJSON(w, http.StatusOK, res)
	}
	if r.Context().Err() != nil {
		return nil // the client went away; the job goes on to its end
	}
	job := "image job"
	if res.PromptID != nil {
		job += " " + *res.PromptID
	}
	switch {
	case errors.Is(err, gpu.ErrNoJob):
		return apiError(http.StatusNotFound, "turnstile %q: %v", ts.name, err)
	case errors.Is(err, gpu.ErrNotOurJob):
		return apiError(http.StatusConflict, "turnstile %q: %v", ts.name, err)
	case errors.Is(err, gpu.ErrInterruptFailed):
		return apiError(http.StatusBadGateway, "turnstile %q: %s: %v", ts.name, job, err)
	case errors.Is(err, gpu.ErrNotStopped):
		return apiError(http.StatusGatewayTimeout, "turnstile %q: %s: %v", ts.name, job, err)
	}
	return apiError(http.StatusInternalServerError, "turnstile %q: %s: %v", ts.name, job, err)
}

// writeCancelledBeforeSent answers an image request whose job was
// cancelled before it was sent to its engine, in the engine's error shape.
func writeCancelledBeforeSent(w http.ResponseWriter, e gpu.ImageEngine) error {
	msg := "gpu_turnstile: image job cancelled before it was sent to " + e.Name()
	if e.Kind() == "a1111" {
		return writeJSON(w, http.StatusConflict, map[string]any{"error": "JobCancelled", "detail": msg, "body": "", "errors": msg})
	}
	return writeComfyError(w, http.StatusConflict, "job_cancelled", msg)
}
