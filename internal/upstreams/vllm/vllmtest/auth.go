package vllmtest

import (
	"net/http"
	"strings"
)

// guard is vLLM's --api-key middleware: with Options.APIKey set, a
// request to a /v1 path (OPTIONS aside) must carry Authorization: Bearer
// KEY, or it gets 401 {"error": "Unauthorized"}. Other paths, the sleep
// routes among them, are not checked.
func (s *Server) guard(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.APIKey != "" && r.Method != http.MethodOptions && strings.HasPrefix(r.URL.Path, "/v1") &&
			r.Header.Get("Authorization") != "Bearer "+s.opts.APIKey {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
			return
		}
		h.ServeHTTP(w, r)
	})
}
