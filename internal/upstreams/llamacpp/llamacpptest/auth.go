package llamacpptest

import (
	"net/http"
	"strings"
)

// guard is --api-key on a route: with Options.APIKey set, a request must
// carry the key as Authorization: Bearer or X-Api-Key, or it gets
// llama-server's 401.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.APIKey != "" && !s.hasKey(r) {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{
				"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})
			return
		}
		h(w, r)
	}
}

// hasKey reports whether r carries the key, as llama-server reads it.
func (s *Server) hasKey(r *http.Request) bool {
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && bearer == s.opts.APIKey {
		return true
	}
	return r.Header.Get("X-Api-Key") == s.opts.APIKey
}
