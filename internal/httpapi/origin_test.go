package httpapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func request(method, host string, header ...string) *http.Request {
	r := httptest.NewRequest(method, "http://"+host+"/holds", nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

func TestCrossOriginCheck(t *testing.T) {
	c, err := NewCrossOrigin([]string{"https://Launcher.Example:443"})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		r    *http.Request
		ok   bool
	}{
		{"script: no Origin, no Sec-Fetch-Site", request("POST", "gpu:8080"), true},
		{"same origin by Sec-Fetch-Site", request("POST", "gpu:8080", "Sec-Fetch-Site", "same-origin", "Origin", "http://gpu:8080"), true},
		{"typed in the address bar", request("POST", "gpu:8080", "Sec-Fetch-Site", "none"), true},
		{"cross-site", request("POST", "gpu:8080", "Sec-Fetch-Site", "cross-site"), false},
		{"same-site is not same-origin", request("DELETE", "gpu:8080", "Sec-Fetch-Site", "same-site", "Origin", "http://other.gpu:8080"), false},
		{"old browser, Origin of this host", request("POST", "gpu:8080", "Origin", "http://gpu:8080"), true},
		{"old browser, another host", request("POST", "gpu:8080", "Origin", "https://evil.example"), false},
		{"old browser, another port", request("POST", "gpu:8080", "Origin", "http://gpu:9090"), false},
		{"opaque origin", request("POST", "gpu:8080", "Origin", "null"), false},
		{"trusted origin", request("POST", "gpu:8080", "Sec-Fetch-Site", "cross-site", "Origin", "https://launcher.example"), true},
		{"trusted origin, old browser", request("POST", "gpu:8080", "Origin", "https://launcher.example"), true},
		{"GET is safe", request("GET", "gpu:8080", "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"), true},
		{"HEAD is safe", request("HEAD", "gpu:8080", "Sec-Fetch-Site", "cross-site"), true},
		{"OPTIONS is safe", request("OPTIONS", "gpu:8080", "Origin", "https://evil.example"), true},
	}
	for _, tc := range cases {
		err := c.Check(tc.r)
		if tc.ok != (err == nil) {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var ref *Refusal
		if err != nil && (!errors.As(err, &ref) || ref.Status != http.StatusForbidden || !strings.Contains(ref.Message, "trusted_origins")) {
			t.Errorf("%s: refusal %#v", tc.name, err)
		}
	}
}

func TestParseOrigin(t *testing.T) {
	good := map[string]string{
		"https://app.example.com":     "https://app.example.com",
		"HTTPS://App.Example.com:443": "https://app.example.com",
		"http://gpu-box:80":           "http://gpu-box",
		"http://gpu-box:8080":         "http://gpu-box:8080",
		"https://[::1]:443":           "https://[::1]",
		"http://[::1]:8080":           "http://[::1]:8080",
		"chrome-extension://abcdef":   "chrome-extension://abcdef",
	}
	for in, want := range good {
		if got, err := ParseOrigin(in); err != nil || got != want {
			t.Errorf("ParseOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "null", "app.example.com", "https://", "https://app.example.com/",
		"https://app.example.com/path", "https://app.example.com?x", "https://app.example.com#", "https://u:p@app.example.com",
		"https://app.example.com:", "mailto:x@example.com", "https://app example.com", "://x"} {
		if got, err := ParseOrigin(in); err == nil {
			t.Errorf("ParseOrigin(%q) = %q, want an error", in, got)
		} else if !strings.Contains(err.Error(), "invalid origin") {
			t.Errorf("ParseOrigin(%q): %v", in, err)
		}
	}
	if _, err := NewCrossOrigin([]string{"https://ok.example", "https://bad.example/"}); err == nil || !strings.Contains(err.Error(), "bad.example/") {
		t.Errorf("NewCrossOrigin with a bad origin: %v", err)
	}
}

func TestRequireJSON(t *testing.T) {
	body := func(ct string, length int64, chunked bool) *http.Request {
		r := httptest.NewRequest("POST", "http://gpu/holds", strings.NewReader("{}"))
		r.ContentLength = length
		if chunked {
			r.TransferEncoding = []string{"chunked"}
		}
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		return r
	}
	cases := []struct {
		name string
		r    *http.Request
		ok   bool
	}{
		{"no body, no type", body("", 0, false), true},
		{"no body, a form's type", body("text/plain", 0, false), true},
		{"JSON", body("application/json", 2, false), true},
		{"JSON with a charset", body("application/json; charset=utf-8", 2, false), true},
		{"JSON in capitals", body("Application/JSON", 2, false), true},
		{"JSON, chunked", body("application/json", -1, true), true},
		{"text/plain form", body("text/plain", 2, false), false},
		{"urlencoded form", body("application/x-www-form-urlencoded", 2, false), false},
		{"multipart form", body("multipart/form-data; boundary=x", 2, false), false},
		{"no type", body("", 2, false), false},
		{"no type, chunked", body("", -1, true), false},
		{"no type, unknown length (HTTP/2)", body("", -1, false), false},
		{"a type that does not parse", body("application/json;;", 2, false), false},
		{"JSON-like", body("application/json-seq", 2, false), false},
	}
	for _, tc := range cases {
		err := RequireJSON(tc.r)
		if tc.ok != (err == nil) {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var ref *Refusal
		if err != nil && (!errors.As(err, &ref) || ref.Status != http.StatusUnsupportedMediaType ||
			!strings.Contains(ref.Message, "Content-Type: application/json")) {
			t.Errorf("%s: refusal %#v", tc.name, err)
		}
	}
}

func TestGuard(t *testing.T) {
	c, _ := NewCrossOrigin(nil)
	r := request("POST", "gpu:8080", "Origin", "https://evil.example", "Content-Type", "text/plain")
	r.ContentLength = 2
	var ref *Refusal
	if err := c.Guard(r); !errors.As(err, &ref) || ref.Status != http.StatusForbidden {
		t.Fatalf("a cross-site form: %v, want 403 first", err)
	}
	r.Header.Del("Origin")
	if err := c.Guard(r); !errors.As(err, &ref) || ref.Status != http.StatusUnsupportedMediaType {
		t.Fatalf("a same-site form: %v, want 415", err)
	}
	r.Header.Set("Content-Type", "application/json")
	if err := c.Guard(r); err != nil {
		t.Fatalf("a script's JSON: %v", err)
	}
}
