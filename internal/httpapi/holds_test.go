package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// FuzzHoldRequest sends arbitrary requests (method, path, headers, body)
// into the hold routes of a site, on a GPU that is already held (so that
// no route waits, and nothing can be granted): no input panics, none is
// granted, and every refusal is a 4xx with a JSON error.
func FuzzHoldRequest(f *testing.F) {
	ts := testTurnstile("fuzz")
	f.Cleanup(ts.orch().Close)
	ts.orch().Apply(&gpu.Config{}, zap.NewNop())
	held, err := ts.TakeHold(context.Background(), "fuzz", time.Hour)
	if err != nil {
		f.Fatalf("a new GPU cannot be held: %v", err)
	}
	origin, err := NewCrossOrigin([]string{"https://launcher.example"})
	if err != nil {
		f.Fatal(err)
	}
	hh := &SiteHolds{Turnstile: ts, Origin: origin}
	type seed struct {
		method, path, contentType, origin, fetchSite, body string
		chunked                                            bool
	}
	for _, s := range []seed{
		{"POST", "/holds", "application/json", "", "", `{"owner":"steam","ttl":"2m","wait":false}`, false},
		{"POST", "/holds", "application/json", "", "", `{"owner":"steam","ttl":"2m"}`, true},
		{"POST", "/holds", "text/plain", "https://evil.example", "", `{"owner":"evil","ttl":"24h"}`, false},
		{"POST", "/holds", "text/plain", "", "cross-site", `{"owner":"evil"}`, false},
		{"POST", "/holds", "", "", "", `{"owner":"x"}`, true},
		{"POST", "/holds", "application/json", "https://launcher.example", "cross-site", `{"turnstile":"other"}`, false},
		{"POST", "/holds", "application/json; charset=utf-8", "http://gpu:8080", "same-origin", `{"ttl":1e309}`, false},
		{"POST", "/holds", "application/json", "", "", `{"ttl":"-1s"}`, false},
		{"POST", "/holds", "application/json", "", "", `{"ttl":[1]} {}`, false},
		{"POST", "/holds", "application/json", "", "", `{"owner":"` + strings.Repeat("é", 120) + `"}`, false},
		{"POST", "/holds", "application/json", "", "", "", false},
		{"POST", "/holds/abc/renew", "application/json", "", "", `{"ttl":"10m"}`, false},
		{"POST", "/holds/abc/renew", "", "", "", "", false},
		{"DELETE", "/holds/abc", "", "null", "", "", false},
		{"DELETE", "/holds/", "", "", "", "", false},
		{"GET", "/holds", "", "https://evil.example", "cross-site", "", false},
		{"PUT", "//holds//x/renew/", "application/json", "", "", "{}", false},
		{"PATCH", "/status", "", "", "", "", false},
		{"", "", "application/json;;", "%zz", "same-site", "\x00", true},
	} {
		f.Add(s.method, s.path, s.contentType, s.origin, s.fetchSite, []byte(s.body), s.chunked)
	}
	f.Fuzz(func(t *testing.T, method, path, contentType, fromOrigin, fetchSite string, body []byte, chunked bool) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a route that would wait for the GPU returns at once
		r := (&http.Request{Method: method, URL: &url.URL{Path: path}, Host: "gpu:8080", Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}).WithContext(ctx)
		if chunked {
			r.ContentLength, r.TransferEncoding = -1, []string{"chunked"}
		}
		for k, v := range map[string]string{"Content-Type": contentType, "Origin": fromOrigin, "Sec-Fetch-Site": fetchSite} {
			if v != "" {
				r.Header.Set(k, v)
			}
		}
		w := httptest.NewRecorder()
		if err := hh.ServeHTTP(w, r); err != nil {
			t.Fatalf("%s %q: error for Caddy: %v", method, path, err)
		}
		if st := ts.Status(); len(st.Holds) != 1 || st.Holds[0].ID != held.ID {
			t.Fatalf("%s %q: a hold was granted", method, path)
		}
		var out struct{ Error string }
		switch code := w.Code; {
		case w.Body.Len() == 0:
			// Only a new hold's wait ends without an answer: its client
			// (here, its context) went away.
			if method != http.MethodPost || strings.Trim(path, "/") != "holds" {
				t.Fatalf("%s %q: no answer", method, path)
			}
		case code == http.StatusOK:
			if method != http.MethodGet {
				t.Fatalf("%s %q: 200 %s", method, path, w.Body)
			}
		case code < 400 || code > 499:
			t.Fatalf("%s %q: %d %s, want a 4xx", method, path, code, w.Body)
		case json.Unmarshal(w.Body.Bytes(), &out) != nil || !strings.HasPrefix(out.Error, "gpu_turnstile: ") ||
			w.Header().Get("Content-Type") != "application/json":
			t.Fatalf("%s %q: %d %q is not a JSON error", method, path, code, w.Body)
		}
	})
}
