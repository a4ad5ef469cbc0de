package httpapi

import (
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// cancelJob cancels t's running image job and answers, once its engine
// has shown the job's end, 200 {"prompt_id","engine","outcome"}. It
// serves the admin route DELETE /gpu_turnstile/job and the status
// handler's DELETE ?view=job; errors are caddy.APIError values. With
// force=1 the job is abandoned instead: the GPU is handed on after the
// engine's free although the job may still compute (gpu.ForceEndJob).
func cancelJob(w http.ResponseWriter, r *http.Request, t Turnstile) error {
	var res gpu.Cancelled
	var err error
	switch f := r.URL.Query().Get("force"); f {
	case "":
		res, err = t.CancelJob(r.Context())
	case "1", "true":
		res, err = t.ForceEndJob(r.Context(), requester(r))
	default:
		return apiError(http.StatusBadRequest, "force=%q: use force=1 to hand the GPU on without waiting for the job's end, or leave it out", f)
	}
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
	name := t.Name()
	switch {
	case errors.Is(err, gpu.ErrNoJob):
		return apiError(http.StatusNotFound, "turnstile %q: %v", name, err)
	case errors.Is(err, gpu.ErrNotOurJob):
		return apiError(http.StatusConflict, "turnstile %q: %v", name, err)
	case errors.Is(err, gpu.ErrInterruptFailed):
		return apiError(http.StatusBadGateway, "turnstile %q: %s: %v", name, job, err)
	case errors.Is(err, gpu.ErrNotStopped):
		return apiError(http.StatusGatewayTimeout, "turnstile %q: %s: %v", name, job, err)
	}
	return apiError(http.StatusInternalServerError, "turnstile %q: %s: %v", name, job, err)
}

// requester says who sent r, for the log of a forced end.
func requester(r *http.Request) string {
	who := r.RemoteAddr
	if user, _, ok := r.BasicAuth(); ok {
		who = user + "@" + who
	}
	if ua := r.UserAgent(); ua != "" {
		who += " (" + ua + ")"
	}
	return who
}

// serveCancel answers a DELETE to the status handler. Only with controls
// does it cancel the running job (?view=job), since the status handler
// usually sits on an open port. A page of another site cannot forge the
// cancel: the cross-origin check refuses it (a DELETE also needs a CORS
// preflight, which this handler never grants, but the check does not
// lean on that).
func (s *StatusRoutes) serveCancel(w http.ResponseWriter, r *http.Request) error {
	if err := refused(s.Origin.Guard(r)); err != nil {
		return WriteAPIError(w, err)
	}
	if !s.Controls {
		w.Header().Set("Allow", "GET, HEAD")
		return writeJSON(w, http.StatusMethodNotAllowed,
			map[string]string{"error": "gpu_turnstile: DELETE is not allowed: this gpu_turnstile_status has no `controls`"})
	}
	if r.URL.Query().Get("view") != "job" {
		return writeJSON(w, http.StatusBadRequest,
			map[string]string{"error": "gpu_turnstile: DELETE cancels the running image job: use ?view=job"})
	}
	return WriteAPIError(w, cancelJob(w, r, s.Turnstile))
}

// CancelledBeforeSent is the answer to an image request whose job was
// cancelled before it was sent to its engine, named engine; the caller
// writes it in the engine's error shape.
func CancelledBeforeSent(engine string) Error {
	return Error{Status: http.StatusConflict, Code: "job_cancelled",
		Message: "gpu_turnstile: image job cancelled before it was sent to " + engine}
}

// WriteAPIError answers a caddy.APIError on a site as the admin endpoint
// does, {"error":"..."}; other errors, and nil, it returns for Caddy.
func WriteAPIError(w http.ResponseWriter, err error) error {
	var apiErr caddy.APIError
	if errors.As(err, &apiErr) {
		return writeJSON(w, apiErr.HTTPStatus, map[string]string{"error": apiErr.Err.Error()})
	}
	return err
}
