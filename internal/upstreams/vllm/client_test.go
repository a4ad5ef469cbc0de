package vllm_test

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
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

func newVLLM(t *testing.T, opts vllmtest.Options) (*vllmtest.Server, *vllm.Client, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := vllmtest.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	c, err := vllm.NewClient(srv.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, gpu
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8000", "ftp://x", "http://"} {
		if _, err := vllm.NewClient(u, nil); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
}

func TestSleepThenWakeFreeAndRetakeTheGPU(t *testing.T) {
	t.Parallel()
	for _, jsonAnswer := range []bool{false, true} {
		srv, c, gpu := newVLLM(t, vllmtest.Options{JSONSleepAnswer: jsonAnswer})
		ctx := context.Background()
		if err := c.SleepAndConfirm(ctx); err != nil {
			t.Fatalf("JSON answer %v: SleepAndConfirm: %v", jsonAnswer, err)
		}
		if gpu.Users("vllm") != 0 || !srv.Sleeping() {
			t.Fatalf("after SleepAndConfirm: %d users, sleeping %v", gpu.Users("vllm"), srv.Sleeping())
		}
		if err := c.WakeAndConfirm(ctx, 50*time.Millisecond); err != nil {
			t.Fatalf("WakeAndConfirm: %v", err)
		}
		if gpu.Users("vllm") != 1 || srv.Sleeping() || srv.Sleeps() != 1 || srv.Wakes() != 1 {
			t.Fatalf("after WakeAndConfirm: %d users, sleeping %v", gpu.Users("vllm"), srv.Sleeping())
		}
	}
}

// Sleep sends its level and mode in the query, where vLLM reads them:
// level 0 pauses scheduling and keeps the memory.
func TestSleepSendsLevelAndModeInTheQuery(t *testing.T) {
	t.Parallel()
	srv, c, gpu := newVLLM(t, vllmtest.Options{})
	if err := c.Sleep(context.Background(), 0, "keep"); err != nil {
		t.Fatal(err)
	}
	if asleep, err := c.IsSleeping(context.Background()); err != nil || !asleep || gpu.Users("vllm") != 1 || !srv.Sleeping() {
		t.Fatalf("after a level-0 sleep: asleep %v (%v), %d users; want paused with its memory", asleep, err, gpu.Users("vllm"))
	}
}

func TestWithoutDevModeSleepRoutesAreErrNoSleepMode(t *testing.T) {
	t.Parallel()
	_, c, _ := newVLLM(t, vllmtest.Options{NoDevMode: true})
	ctx := context.Background()
	_, isErr := c.IsSleeping(ctx)
	for name, err := range map[string]error{
		"Sleep": c.Sleep(ctx, 1, "wait"), "WakeUp": c.WakeUp(ctx), "IsSleeping": isErr,
		"SleepAndConfirm": c.SleepAndConfirm(ctx),
	} {
		if !errors.Is(err, vllm.ErrNoSleepMode) {
			t.Errorf("%s: %v, want ErrNoSleepMode", name, err)
		}
	}
	if ids, err := c.Models(ctx); err != nil || len(ids) != 1 || ids[0] != "Qwen/Qwen3-8B" {
		t.Fatalf("Models: %v, %v", ids, err)
	}
}

// sleepStub answers /is_sleeping from sleeping(n), n counting its calls.
func sleepStub(t *testing.T, sleeping func(n int64) bool) *vllm.Client {
	t.Helper()
	var calls atomic.Int64
	stub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/is_sleeping" {
			return // 200, empty: /sleep and /wake_up
		}
		if sleeping(calls.Add(1)) {
			w.Write([]byte(`{"is_sleeping":true}`))
		} else {
			w.Write([]byte(`{"is_sleeping":false}`))
		}
	}))
	t.Cleanup(stub.Close)
	c, _ := vllm.NewClient(stub.URL, nil)
	return c
}

// WakeAndConfirm polls until /is_sleeping turns false, and names the
// failure when it never does.
func TestWakeAndConfirmPolls(t *testing.T) {
	t.Parallel()
	late := sleepStub(t, func(n int64) bool { return n < 3 })
	if err := late.WakeAndConfirm(context.Background(), 10*time.Millisecond); err != nil {
		t.Fatalf("a wake seen on the third poll: %v", err)
	}
	never := sleepStub(t, func(int64) bool { return true })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := never.WakeAndConfirm(ctx, 10*time.Millisecond); err == nil || !strings.Contains(err.Error(), "still sleeps") {
		t.Fatalf("never awake: %v", err)
	}
}

func TestSleepAndConfirmFailsWhenNotAsleep(t *testing.T) {
	t.Parallel()
	c := sleepStub(t, func(int64) bool { return false })
	if err := c.SleepAndConfirm(context.Background()); err == nil || !strings.Contains(err.Error(), "is_sleeping says false") {
		t.Fatalf("err %v", err)
	}
}
