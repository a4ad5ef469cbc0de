package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
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
