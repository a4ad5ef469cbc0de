package turnstile

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

// cancelJob cancels ts's running image job and answers, once its engine
// has shown the job's end, 200 {"prompt_id","engine","outcome"}. It
// serves the admin route DELETE /gpu_turnstile/job and the status
// handler's DELETE ?view=job; errors are caddy.APIError values. With
// force=1 the job is abandoned instead: the GPU is handed on after the
// engine's free although the job may still compute (gpu.ForceEndJob).
func cancelJob(w http.ResponseWriter, r *http.Request, ts *turnstile) error {
	var res gpu.Cancelled
	var err error
	switch f := r.URL.Query().Get("force"); f {
	case "":
		res, err = ts.CancelJob(r.Context())
	case "1", "true":
		res, err = ts.ForceEndJob(r.Context(), requester(r))
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
func (h *StatusHandler) serveCancel(w http.ResponseWriter, r *http.Request) error {
	if err := refused(h.origin.Guard(r)); err != nil {
		return writeAPIError(w, err)
	}
	if !h.Controls {
		w.Header().Set("Allow", "GET, HEAD")
		return writeJSON(w, http.StatusMethodNotAllowed,
			map[string]string{"error": "gpu_turnstile: DELETE is not allowed: this gpu_turnstile_status has no `controls`"})
	}
	if r.URL.Query().Get("view") != "job" {
		return writeJSON(w, http.StatusBadRequest,
			map[string]string{"error": "gpu_turnstile: DELETE cancels the running image job: use ?view=job"})
	}
	return writeAPIError(w, cancelJob(w, r, h.ts))
}

// writeAPIError answers a caddy.APIError on a site as the admin endpoint
// does, {"error":"..."}; other errors, and nil, it returns for Caddy.
func writeAPIError(w http.ResponseWriter, err error) error {
	var apiErr caddy.APIError
	if errors.As(err, &apiErr) {
		return writeJSON(w, apiErr.HTTPStatus, map[string]string{"error": apiErr.Err.Error()})
	}
	return err
}

// pageWithControls is the status page with its "Cancel job" button
// enabled, for a status handler with controls. Only the body's attribute
// differs, so the hashes of its script and style still hold.
var pageWithControls = func() []byte {
	page := bytes.Replace(pageHTML, []byte("<body>"), []byte(`<body data-controls="on">`), 1)
	if bytes.Equal(page, pageHTML) {
		panic("page.html lacks <body>")
	}
	return page
}()

// writeCancelledBeforeSent answers an image request whose job was
// cancelled before it was sent to its engine, in the engine's error shape.
func writeCancelledBeforeSent(w http.ResponseWriter, e gpu.ImageEngine) error {
	return writeImageError(w, e, httpapi.Error{Status: http.StatusConflict, Code: "job_cancelled",
		Message: "gpu_turnstile: image job cancelled before it was sent to " + e.Name()})
}
