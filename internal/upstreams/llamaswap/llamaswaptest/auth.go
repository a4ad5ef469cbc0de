package llamaswaptest

import (
	"encoding/base64"
	"net/http"
	"strings"
)

// guard is llama-swap's apiKeyAuth on a route: with Options.APIKey set,
// a request must carry the key (Basic auth with the key as password,
// else Authorization: Bearer, else x-api-key), or it gets 401
// "unauthorized: invalid or missing API key" in the client's preferred
// form.
func (s *Server) guard(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.APIKey != "" && providedKey(r) != s.opts.APIKey {
			sendResponse(w, r, http.StatusUnauthorized, "unauthorized: invalid or missing API key")
			return
		}
		h(w, r)
	}
}

// providedKey is the key a request carries, as llama-swap picks it: Basic
// auth's password first, then a Bearer token, then x-api-key.
func providedKey(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	if enc, ok := strings.CutPrefix(auth, "Basic "); ok {
		if dec, err := base64.StdEncoding.DecodeString(enc); err == nil {
			if _, pass, ok := strings.Cut(string(dec), ":"); ok && pass != "" {
				return pass
			}
		}
	}
	if bearer, ok := strings.CutPrefix(auth, "Bearer "); ok && bearer != "" {
		return bearer
	}
	return r.Header.Get("X-Api-Key")
}
