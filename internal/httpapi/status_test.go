package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestStatusRoutes(t *testing.T) {
	ts := testTurnstile("default")
	defer ts.orch().Close()
	origin, _ := NewCrossOrigin(nil)
	s := &StatusRoutes{Turnstile: ts, Origin: origin}
	serve := func(method, target string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, target, nil)
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		w := httptest.NewRecorder()
		if err := s.ServeHTTP(w, r); err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		return w
	}
	if w := serve("GET", "/healthz"); w.Code != 200 || !strings.HasPrefix(w.Body.String(), `{"state":"idle",`) ||
		!strings.Contains(w.Body.String(), `"wait_buffer":{"bytes":0,"limit":0,"peak":0}`) {
		t.Errorf("JSON: %d %s", w.Code, w.Body)
	}
	if w := serve("GET", "/healthz?view=nope"); w.Code != 400 {
		t.Errorf("a bad view: %d %s", w.Code, w.Body)
	}
	w := serve("GET", "/healthz", "Accept", "text/html")
	csp := w.Header().Get("Content-Security-Policy")
	if !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(csp, "script-src 'sha256-") ||
		strings.Contains(csp, "unsafe-inline") || strings.Contains(w.Body.String(), `data-controls="on"`) {
		t.Errorf("page: %v", w.Header())
	}
	if w := serve("DELETE", "/healthz?view=job"); w.Code != 405 || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("DELETE without controls: %d %s", w.Code, w.Body)
	}
	s.Controls = true
	if w := serve("GET", "/healthz?view=html"); !strings.Contains(w.Body.String(), `<body data-controls="on">`) {
		t.Error("the page with controls has no Cancel button")
	}
	if w := serve("DELETE", "/healthz"); w.Code != 400 || !strings.Contains(w.Body.String(), "use ?view=job") {
		t.Errorf("DELETE without view=job: %d %s", w.Code, w.Body)
	}
	if w := serve("DELETE", "/healthz?view=job", "Sec-Fetch-Site", "cross-site"); w.Code != 403 {
		t.Errorf("a cross-site DELETE: %d %s", w.Code, w.Body)
	}
	if w := serve("DELETE", "/healthz?view=job"); w.Code != 404 || !strings.Contains(w.Body.String(), "no image job") {
		t.Errorf("DELETE with no job: %d %s", w.Code, w.Body)
	}
}

func TestSiteHoldsNameTheirTurnstile(t *testing.T) {
	ts := testTurnstile("gpu1")
	defer ts.orch().Close()
	origin, _ := NewCrossOrigin(nil)
	s := &SiteHolds{Turnstile: ts, Origin: origin}
	r := httptest.NewRequest("POST", "/holds", strings.NewReader(`{"turnstile":"gpu2"}`))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	if err := s.ServeHTTP(w, r); err != nil || w.Code != 400 ||
		!strings.Contains(w.Body.String(), `turnstile: \"gpu2\", but this route holds turnstile \"gpu1\"`) {
		t.Errorf("another turnstile's hold: %v %d %s", err, w.Code, w.Body)
	}
}
