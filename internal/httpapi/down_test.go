package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

func TestForwardFailed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{caddyhttp.Error(http.StatusBadGateway, errors.New("dial: refused")), true},
		{fmt.Errorf("wrapped: %w", caddyhttp.Error(http.StatusServiceUnavailable, nil)), true},
		{caddyhttp.Error(http.StatusGatewayTimeout, errors.New("timeout")), true},
		{caddyhttp.Error(http.StatusBadRequest, errors.New("bad body")), false},
		{caddyhttp.Error(499, errors.New("client went away")), false},
		{errors.New("not a handler error"), false},
	} {
		if he, ok := ForwardFailed(tc.err); ok != tc.want || (ok && he.StatusCode < 502) {
			t.Errorf("%v: %d, %v; want %v", tc.err, he.StatusCode, ok, tc.want)
		}
	}
}

// TestEngineDownClosesAfterABody: a request whose forward failed with a
// body part read is answered on a connection that closes; one without a
// body keeps its connection.
func TestEngineDownClosesAfterABody(t *testing.T) {
	he := caddyhttp.Error(http.StatusGatewayTimeout, errors.New("i/o timeout"))
	for _, tc := range []struct {
		name  string
		req   *http.Request
		close bool
	}{
		{"a chunked body", httptest.NewRequest("POST", "/api/chat", struct{ io.Reader }{strings.NewReader("{")}), true},
		{"a sized body", httptest.NewRequest("POST", "/api/chat", strings.NewReader("{}")), true},
		{"no body", httptest.NewRequest("GET", "/api/tags", nil), false},
	} {
		w := httptest.NewRecorder()
		WriteEngineDown(w, tc.req, "/api/chat", he, "ollama", "ollama", zap.NewNop())
		if got := w.Header().Get("Connection") == "close"; got != tc.close || w.Code != http.StatusGatewayTimeout {
			t.Errorf("%s: %d, Connection %q; want 504, close %v", tc.name, w.Code, w.Header().Get("Connection"), tc.close)
		}
	}
}
