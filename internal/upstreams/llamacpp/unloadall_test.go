package llamacpp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp"
)

// stuckRouter is an in-memory llama-server router whose one model never
// finishes exiting, so UnloadAll's pacing runs in fake time.
type stuckRouter struct {
	lists, unloads atomic.Int64
}

func (r *stuckRouter) RoundTrip(req *http.Request) (*http.Response, error) {
	body := `{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`
	status := 200
	switch req.Method + " " + req.URL.Path {
	case "GET /props":
		body = `{"role":"router","max_instances":4,"models_autoload":true}`
	case "GET /models":
		r.lists.Add(1)
		body = `{"data":[{"id":"m","status":{"value":"loaded","args":[]}}],"object":"list"}`
	case "POST /models/unload":
		r.unloads.Add(1)
		body = `{"success":true}`
	default:
		status = 404
	}
	return &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body)), Header: http.Header{}, Request: req}, nil
}

// UnloadAll polls fast at first and backs off to pollMax, and asks again,
// about once a second, to unload a model that does not go.
func TestUnloadAllPacesItsPollsAndAsksAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &stuckRouter{}
		c, err := llamacpp.NewClient("http://llama.test", &http.Client{Transport: rt})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		names, err := c.UnloadAll(ctx, time.Second)
		if len(names) != 1 || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "m (loaded)") {
			t.Fatalf("UnloadAll = %v, %v; want m, and a deadline naming it", names, err)
		}
		t.Logf("%d polls, %d unloads", rt.lists.Load(), rt.unloads.Load())
		// 5ms polls for 100ms, then ×1.5 up to 1s: about 45 in 10s.
		if n := rt.lists.Load(); n < 30 || n > 60 {
			t.Errorf("%d polls in 10s, want about 45", n)
		}
		if n := rt.unloads.Load(); n < 8 || n > 11 {
			t.Errorf("%d unload requests in 10s, want one a second", n)
		}
	})
}
