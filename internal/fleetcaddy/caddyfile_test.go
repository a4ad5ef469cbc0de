package fleetcaddy

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/headers"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func TestPolicyCaddyfile(t *testing.T) {
	s := new(FleetSelection)
	d := caddyfile.NewTestDispenser(`gpu_turnstile {
		status_path /status
		stale 45s
		keep_for_chats 2m
	}`)
	if err := s.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if s.StatusPath != "/status" || time.Duration(s.Stale) != 45*time.Second || time.Duration(s.KeepForChats) != 2*time.Minute {
		t.Errorf("read %+v", s)
	}
}

func TestPolicyCaddyfileInvalid(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"gpu_turnstile {\n\tstale 0s\n}", `stale "0s": want a duration`},
		{"gpu_turnstile {\n\tkeep_for_chats soon\n}", `keep_for_chats "soon": want a duration`},
		{"gpu_turnstile {\n\tkeep_for_chats\n}", "wrong argument count"},
		{"gpu_turnstile {\n\tstale 1s 2s\n}", "wrong argument count"},
		{"gpu_turnstile {\n\tretries 3\n}", `unknown option "retries"`},
	} {
		err := new(FleetSelection).UnmarshalCaddyfile(caddyfile.NewTestDispenser(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "Testfile:2") {
			t.Errorf("%q: %v, want an error with %q and its line", c.in, err, c.want)
		}
	}
}

// The status streams carry the block's header_up fields that name
// nothing of a request (a credential), and its health_headers, which win.
func TestStatusHeaders(t *testing.T) {
	rp := &reverseproxy.Handler{
		Headers: &headers.Handler{Request: &headers.HeaderOps{
			Set: http.Header{"Authorization": {"Bearer t"}, "X-Real-Ip": {"{http.request.remote.host}"}, "Host": {"gpu.lan"}},
			Add: http.Header{"X-Team": {"studio"}, "X-Probe": {"from header_up"}},
		}},
		HealthChecks: &reverseproxy.HealthChecks{Active: &reverseproxy.ActiveHealthChecks{Headers: http.Header{"X-Probe": {"1"}}}},
	}
	got := statusHeaders(rp)
	want := http.Header{"Authorization": {"Bearer t"}, "X-Team": {"studio"}, "X-Probe": {"1"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("status headers %v, want %v", got, want)
	}
	if h := statusHeaders(&reverseproxy.Handler{}); h != nil {
		t.Errorf("a block with no headers: %v", h)
	}
}

// A JSON config's negative durations fail at provision, naming the field.
func TestPolicyNegativeDurations(t *testing.T) {
	for name, s := range map[string]*FleetSelection{
		"stale":          {Stale: -1},
		"affinity":       {Affinity: caddy.Duration(-time.Second)},
		"keep_for_chats": {KeepForChats: caddy.Duration(-time.Minute)},
	} {
		ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
		err := s.Provision(ctx)
		cancel()
		if err == nil || !strings.HasPrefix(err.Error(), name+" ") {
			t.Errorf("%s negative: %v, want an error naming it", name, err)
		}
	}
}
