package fleetcaddy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/fleet"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// BenchmarkFleetSelect16 is the gpu_turnstile policy's Select among 16
// upstreams whose state is known, for a chat whose model one has loaded:
// what each request and each retry costs the front tier. It should
// allocate nothing.
func BenchmarkFleetSelect16(b *testing.B) {
	var hosts []string
	for i := range 16 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: status\ndata: {\"state\":\"llm\",\"engines\":[{\"class\":\"llm\",\"state\":\"ready\",\"models\":[\"m%d\",\"other\"]},{\"class\":\"image\",\"state\":\"ready\"}]}\n\n", i)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}))
		b.Cleanup(srv.Close)
		hosts = append(hosts, srv.Listener.Addr().String())
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	s := new(FleetSelection)
	if err := s.Provision(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Cleanup()
	pool := make(reverseproxy.UpstreamPool, len(hosts))
	for i, h := range hosts {
		pool[i] = &reverseproxy.Upstream{Dial: h, Host: new(reverseproxy.Host)}
	}
	w := httptest.NewRecorder()
	deadline := time.Now().Add(10 * time.Second)
	s.Select(pool, chatRequest(&fleet.Request{Class: route.LLM}), w) // starts following the hosts
	for _, u := range pool {
		for s.follower(u).Snapshot(time.Now(), time.Minute) == nil {
			if time.Now().After(deadline) {
				b.Fatal("the hosts' states never came")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	q := &fleet.Request{Class: route.LLM, Model: "m11"}
	r := chatRequest(q)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		q.Tried = 0
		if s.Select(pool, r, w) != pool[11] {
			b.Fatal("wrong pick")
		}
	}
}

// chatRequest is a chat that gpu_turnstile_classify found to be q.
func chatRequest(q *fleet.Request) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/api/chat", nil)
	return r.WithContext(context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{varRequest: q}))
}
