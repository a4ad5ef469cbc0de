package llamacpptest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

// With --api-key, POST /models/load and /models/unload answer 401
// without the key and are served with it as a Bearer token or X-Api-Key;
// /health and /models stay public.
func TestAPIKey(t *testing.T) {
	srv, gpu := newFake(t, llamacpptest.Options{APIKey: "k3y"})
	send := func(path, header, value string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL()+path, strings.NewReader(`{"model":"`+qwen+`"}`))
		if header != "" {
			req.Header.Set(header, value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/models/load", "/models/unload"} {
		status, body := send(path, "", "")
		if status != http.StatusUnauthorized || body != envelope(401, "Invalid API Key", "authentication_error") {
			t.Errorf("%s without the key: %d %s", path, status, body)
		}
		if status, _ := send(path, "Authorization", "Bearer wrong"); status != http.StatusUnauthorized {
			t.Errorf("%s with a wrong key: %d", path, status)
		}
	}
	if status, body := send("/models/load", "Authorization", "Bearer k3y"); status != http.StatusOK {
		t.Errorf("load with a Bearer key: %d %s", status, body)
	}
	waitStatus(t, srv, gpu, qwen, "loaded")
	if status, body := send("/models/unload", "X-Api-Key", "k3y"); status != http.StatusOK {
		t.Errorf("unload with X-Api-Key: %d %s", status, body)
	}
	for _, path := range []string{"/health", "/models"} {
		if a := do(t, http.MethodGet, srv.URL()+path, ""); a.status != http.StatusOK {
			t.Errorf("GET %s: %d", path, a.status)
		}
	}
}
