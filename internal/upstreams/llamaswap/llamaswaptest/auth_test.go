package llamaswaptest_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
)

// With apiKeys, /running and the unload routes answer 401 without the
// key, and serve a request that carries it as a Bearer token, as Basic
// auth's password or as x-api-key; /health stays open.
func TestAPIKey(t *testing.T) {
	srv, _ := newFake(t, llamaswaptest.Options{APIKey: "k3y"})
	guarded := []struct{ method, path string }{
		{http.MethodGet, "/running"}, {http.MethodGet, "/unload"},
		{http.MethodPost, "/api/models/unload"}, {http.MethodPost, "/api/models/unload/" + qwen},
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:k3y"))
	for _, r := range guarded {
		a := send(t, r.method, srv.URL()+r.path, "", "")
		if a.status != http.StatusUnauthorized || !strings.Contains(a.body, "unauthorized: invalid or missing API key") ||
			!strings.Contains(a.body, "authentication_error") {
			t.Errorf("%s %s without the key: %d %s", r.method, r.path, a.status, a.body)
		}
		if a := send(t, r.method, srv.URL()+r.path, "", "", "Authorization", "Bearer wrong"); a.status != http.StatusUnauthorized {
			t.Errorf("%s %s with a wrong key: %d", r.method, r.path, a.status)
		}
		for _, h := range [][2]string{{"Authorization", "Bearer k3y"}, {"Authorization", basic}, {"X-Api-Key", "k3y"}} {
			if a := send(t, r.method, srv.URL()+r.path, "", "", h[0], h[1]); a.status != http.StatusOK {
				t.Errorf("%s %s with %s: %d %s", r.method, r.path, h[1], a.status, a.body)
			}
		}
	}
	if a := send(t, http.MethodGet, srv.URL()+"/health", "", ""); a.status != http.StatusOK {
		t.Errorf("/health: %d", a.status)
	}
	if a := send(t, http.MethodGet, srv.URL()+"/running", "", "", "Accept", "text/plain"); a.body != "llama-swap: unauthorized: invalid or missing API key" {
		t.Errorf("Accept text/plain: %q", a.body)
	}
}
