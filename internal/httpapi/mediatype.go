package httpapi

import (
	"mime"
	"net/http"
	"strings"
)

// RequireJSON returns a 415 Refusal for a request that has a body
// (Content-Length > 0, chunked, or of unknown length) whose media type,
// parameters ignored, is not application/json, or is missing; nil
// otherwise. A page of another site can send a form (text/plain,
// urlencoded, multipart) without asking first, never JSON: with this
// rule, a form can never reach a JSON route, even one that the browser's
// own origin checks would let through.
func RequireJSON(r *http.Request) error {
	if r.ContentLength == 0 && len(r.TransferEncoding) == 0 {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && strings.EqualFold(mt, "application/json") {
		return nil
	}
	got := "no Content-Type"
	if ct != "" {
		got = "Content-Type " + clip(ct)
	}
	return &Refusal{Status: http.StatusUnsupportedMediaType,
		Message: "the body must be JSON: send Content-Type: application/json (curl --json '{...}'), not " + got}
}
