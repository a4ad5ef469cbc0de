package llamaswap_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
)

func newSwap(t *testing.T, opts llamaswaptest.Options) (*llamaswaptest.Server, *llamaswap.Client, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := llamaswaptest.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	c, err := llamaswap.NewClient(srv.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, gpu
}

func chat(t *testing.T, url, model string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"`+model+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("chat %s: %d", model, resp.StatusCode)
	}
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := llamaswap.NewClient(u, nil); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
}

func TestEmptyUnloadsAndConfirms(t *testing.T) {
	t.Parallel()
	srv, c, gpu := newSwap(t, llamaswaptest.Options{})
	ctx := context.Background()
	if got, err := c.Empty(ctx); err != nil || got != nil || srv.Unloads() != 0 {
		t.Fatalf("Empty with nothing running: %v, %v, %d unloads; want nothing asked", got, err, srv.Unloads())
	}
	chat(t, srv.URL(), "qwen3-8b")
	got, err := c.Empty(ctx)
	if err != nil || len(got) != 1 || got[0] != "qwen3-8b" {
		t.Fatalf("Empty: %v, %v", got, err)
	}
	if gpu.Users("llamaswap") != 0 || srv.Unloads() != 1 {
		t.Fatalf("after Empty: %d users, %d unloads", gpu.Users("llamaswap"), srv.Unloads())
	}
	if left, err := c.Running(ctx); err != nil || len(left) != 0 {
		t.Fatalf("Running after Empty: %v, %v", left, err)
	}
}

func TestRunningShowsAStartingProcess(t *testing.T) {
	t.Parallel()
	srv, c, gpu := newSwap(t, llamaswaptest.Options{StartDelay: time.Hour})
	go http.Post(srv.URL()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gemma-3-4b"}`))
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "llamaswap", "load gemma-3-4b") >= 0 }) {
		t.Fatal("gemma never started")
	}
	got, err := c.Running(context.Background())
	if err != nil || len(got) != 1 || got[0].Model != "gemma-3-4b" || got[0].State != "starting" || !strings.HasPrefix(got[0].Proxy, "http://127.0.0.1:") {
		t.Fatalf("Running: %+v, %v", got, err)
	}
}

// A process that llama-swap still lists after the unload (a request, or a
// swap under way, started it) makes Empty fail, naming it and its state.
func TestEmptyNamesAProcessStillListed(t *testing.T) {
	t.Parallel()
	var unloaded atomic.Bool
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/api/models/unload" && r.Method == http.MethodPost:
			unloaded.Store(true)
			w.Write([]byte(`{"msg":"ok"}`))
		case r.URL.Path == "/running" && unloaded.Load():
			w.Write([]byte(`{"running":[{"model":"gemma-3-4b","state":"starting"}]}`))
		case r.URL.Path == "/running":
			w.Write([]byte(`{"running":[{"model":"qwen3-8b","state":"stopping"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer stub.Close()
	c, _ := llamaswap.NewClient(stub.URL, nil)
	got, err := c.Empty(context.Background())
	if err == nil || !strings.Contains(err.Error(), "gemma-3-4b (starting)") || len(got) != 1 || got[0] != "qwen3-8b" {
		t.Fatalf("Empty: %v, %v; want qwen3-8b unloaded and an error naming gemma-3-4b", got, err)
	}
}

func TestUnloadFailureIsReported(t *testing.T) {
	t.Parallel()
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/running" {
			w.Write([]byte(`{"running":[{"model":"qwen3-8b","state":"ready"}]}`))
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte(`{"src":"llama-swap","error":{"message":"boom","type":"server_error","param":null,"code":"internal_error"}}`))
	}))
	defer stub.Close()
	c, _ := llamaswap.NewClient(stub.URL, nil)
	_, err := c.Empty(context.Background())
	var se *llamaswap.StatusError
	if !errors.As(err, &se) || se.Status != 500 || !strings.Contains(err.Error(), "unload qwen3-8b") {
		t.Fatalf("err %v, want a 500 status error naming the unload", err)
	}
}

func TestRefusedWhenNothingListens(t *testing.T) {
	t.Parallel()
	stub := httptest.NewServer(http.NotFoundHandler())
	url := stub.URL
	stub.Close()
	c, _ := llamaswap.NewClient(url, nil)
	if _, err := c.Running(context.Background()); !llamaswap.Refused(err) {
		t.Fatalf("err %v, want connection refused", err)
	}
}
