package vllmtest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// With --api-key, the /v1 routes answer 401 {"error":"Unauthorized"}
// without a Bearer key and are served with it; /health and the sleep
// routes stay open.
func TestAPIKey(t *testing.T) {
	srv, _ := newFake(t, vllmtest.Options{APIKey: "k3y"})
	withKey := func(method, path, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL()+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for _, key := range []string{"", "wrong"} {
		if status, body := withKey(http.MethodGet, "/v1/models", key); status != http.StatusUnauthorized || body != `{"error":"Unauthorized"}` {
			t.Errorf("/v1/models with key %q: %d %s", key, status, body)
		}
	}
	if a := send(t, http.MethodPost, srv.URL()+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`); a.status != http.StatusUnauthorized {
		t.Errorf("a chat without the key: %d %s", a.status, a.body)
	}
	if status, body := withKey(http.MethodGet, "/v1/models", "k3y"); status != http.StatusOK {
		t.Errorf("/v1/models with the key: %d %s", status, body)
	}
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/health"}, {http.MethodPost, "/sleep?level=1"}, {http.MethodGet, "/is_sleeping"}, {http.MethodPost, "/wake_up"},
	} {
		if status, body := withKey(r.method, r.path, ""); status != http.StatusOK {
			t.Errorf("%s %s without the key: %d %s", r.method, r.path, status, body)
		}
	}
}
