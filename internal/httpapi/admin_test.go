package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func TestParseSpan(t *testing.T) {
	for raw, want := range map[string]time.Duration{
		``: time.Hour, `null`: time.Hour, `90`: 90 * time.Second, `0.5`: 500 * time.Millisecond,
		`"2m"`: 2 * time.Minute, `"1d"`: 24 * time.Hour,
	} {
		if got, err := parseSpan("ttl", json.RawMessage(raw), time.Hour); err != nil || got != want {
			t.Errorf("parseSpan(%s) = %v, %v; want %v", raw, got, err, want)
		}
	}
	for raw, msg := range map[string]string{
		`0`: "outside (0, 24h0m0s]", `-1`: "outside", `"25h"`: "outside", `1e309`: "want a duration",
		`"soon"`: "wait_timeout: ", `[1]`: "want a duration", `true`: "want a duration",
	} {
		_, err := parseSpan("wait_timeout", json.RawMessage(raw), time.Hour)
		var apiErr caddy.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatus != http.StatusBadRequest || !strings.Contains(err.Error(), msg) {
			t.Errorf("parseSpan(%s): %v, want a 400 with %q", raw, err, msg)
		}
	}
}

func TestDecodeBody(t *testing.T) {
	var v struct {
		TTL string `json:"ttl"`
	}
	for body, want := range map[string]int{
		`{"ttl":"2m"}`: 0, ``: 400, `  `: 400, `{"other":1}`: 400, `{} {}`: 400, `{`: 400,
		`{"ttl":"` + strings.Repeat("x", 64<<10) + `"}`: 413,
	} {
		r := httptest.NewRequest("POST", "/holds", strings.NewReader(body))
		err := decodeBody(r, &v, false)
		var apiErr caddy.APIError
		if got := 0; err != nil && errors.As(err, &apiErr) {
			got = apiErr.HTTPStatus
			if got != want {
				t.Errorf("decodeBody(%.20q): %v, want %d", body, err, want)
			}
		} else if err != nil || want != 0 {
			t.Errorf("decodeBody(%.20q): %v, want %d", body, err, want)
		}
	}
	if err := decodeBody(httptest.NewRequest("POST", "/", nil), &v, true); err != nil {
		t.Errorf("an optional empty body: %v", err)
	}
}

func TestBadStatusQuery(t *testing.T) {
	for q, want := range map[string]string{
		"": "", "view=json": "", "view=html": "", "view=events": "", "view=history&since=x": "",
		"ready=llm": "", "ready=IMAGE&view=json": "",
		"view=xml":              `view "xml": want json, html, events or history`,
		"ready=gpu":             `ready "gpu": want llm or image`,
		"ready=llm&view=events": `ready with view "events"`,
	} {
		v, _ := url.ParseQuery(q)
		if got := badStatusQuery(v); (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("badStatusQuery(%q) = %q, want %q", q, got, want)
		}
	}
}

func TestWriteAPIError(t *testing.T) {
	w := httptest.NewRecorder()
	if err := WriteAPIError(w, allow(httptest.NewRequest("PUT", "/", nil), "GET", "POST")); err != nil {
		t.Fatal(err)
	}
	if w.Code != 405 || w.Body.String() != `{"error":"gpu_turnstile: method PUT not allowed; use GET or POST"}`+"\n" ||
		w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("405: %d %q", w.Code, w.Body)
	}
	other := errors.New("not an API error")
	if err := WriteAPIError(httptest.NewRecorder(), other); err != other {
		t.Errorf("another error: %v, want it returned", err)
	}
	if err := refused(&Refusal{Status: 415, Message: "send JSON"}); err.Error() != "gpu_turnstile: send JSON" {
		t.Errorf("refused: %v", err)
	}
}

// turnstiles is a fixed set of turnstiles.
type turnstiles []Turnstile

func (ts turnstiles) Find(name string) (Turnstile, bool) {
	for _, t := range ts {
		if t.Name() == name {
			return t, true
		}
	}
	return Turnstile{}, false
}

func (ts turnstiles) Range(f func(Turnstile) bool) {
	for _, t := range ts {
		if !f(t) {
			return
		}
	}
}

func TestAdminRoutes(t *testing.T) {
	all := turnstiles{testTurnstile("b"), testTurnstile("a")}
	for _, ts := range all {
		defer ts.orch().Close()
	}
	admin := Admin{Turnstiles: all}
	serve := func(method, target, body string) (*httptest.ResponseRecorder, error) {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		w := httptest.NewRecorder()
		return w, admin.ServeHTTP(w, r)
	}
	// No default turnstile: the first by name is at the top level.
	w, err := serve("GET", "/gpu_turnstile/status", "")
	var st struct {
		State      string
		Turnstiles map[string]Status
	}
	if err != nil || json.Unmarshal(w.Body.Bytes(), &st) != nil || st.State != "idle" || len(st.Turnstiles) != 2 ||
		st.Turnstiles["a"].Turnstile != "a" {
		t.Fatalf("status: %v %s", err, w.Body)
	}
	for _, tc := range []struct{ method, target, body, want string }{
		{"GET", "/gpu_turnstile/history", "", `no turnstile named "default"`},
		{"DELETE", "/gpu_turnstile/job?turnstile=c", "", `no turnstile named "c"`},
		{"DELETE", "/gpu_turnstile/job?turnstile=a", "", `turnstile "a": no image job`},
		{"POST", "/gpu_turnstile/holds", `{"turnstile":"c"}`, `no turnstile named "c"`},
		{"DELETE", "/gpu_turnstile/holds/x", "", `no hold "x"`},
		{"GET", "/gpu_turnstile/other", "", "no such route"},
	} {
		_, err := serve(tc.method, tc.target, tc.body)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.method, tc.target, err, tc.want)
		}
	}
}
