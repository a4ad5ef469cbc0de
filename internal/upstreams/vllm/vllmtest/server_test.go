package vllmtest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// vLLM loads its weights at start-up: they occupy the GPU from the start.
// /health answers 200 with an empty body, /v1/models lists the model,
// /is_sleeping answers {"is_sleeping":false}, and chat answers in OpenAI's
// shape (SSE with stream).
func TestStartsLoadedAndServes(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, vllmtest.Options{})
	if gpu.Users("vllm") != 1 || waitEvent(t, gpu, 0, "weights "+model) != 0 {
		t.Fatal("the weights do not occupy the GPU from the start")
	}
	if a := send(t, http.MethodGet, srv.URL()+"/health", ""); a.status != 200 || a.body != "" {
		t.Fatalf("/health: %d %q", a.status, a.body)
	}
	if a := send(t, http.MethodGet, srv.URL()+"/is_sleeping", ""); a.status != 200 || strings.TrimSpace(a.body) != `{"is_sleeping":false}` {
		t.Fatalf("/is_sleeping: %d %q", a.status, a.body)
	}
	if a := send(t, http.MethodGet, srv.URL()+"/v1/models", ""); a.status != 200 || !strings.Contains(a.body, `"id":"`+model+`"`) {
		t.Fatalf("/v1/models: %d %s", a.status, a.body)
	}
	if a := <-goChat(t, srv, false); a.status != 200 || !strings.Contains(a.body, `"finish_reason":"stop"`) || !strings.Contains(a.body, "tok4") {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
	if a := <-goChat(t, srv, true); a.status != 200 || !strings.HasPrefix(a.header.Get("Content-Type"), "text/event-stream") ||
		!strings.Contains(a.body, `"object":"chat.completion.chunk"`) || !strings.HasSuffix(a.body, "data: [DONE]\n\n") {
		t.Fatalf("stream: %d %s", a.status, a.body)
	}
	nope := send(t, http.MethodPost, srv.URL()+"/v1/completions", `{"model":"nope","prompt":"x"}`)
	if nope.status != 404 || !strings.Contains(nope.body, "The model `nope` does not exist.") {
		t.Fatalf("unknown model: %d %s", nope.status, nope.body)
	}
}

// Without VLLM_SERVER_DEV_MODE=1 the sleep routes do not exist (404), and
// serving goes on.
func TestNoDevModeHasNoSleepRoutes(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, vllmtest.Options{NoDevMode: true})
	for _, r := range []struct{ method, path string }{
		{http.MethodPost, "/sleep?level=1"}, {http.MethodPost, "/wake_up"},
		{http.MethodGet, "/is_sleeping"}, {http.MethodPost, "/collective_rpc"},
	} {
		if a := send(t, r.method, srv.URL()+r.path, ""); a.status != 404 || strings.TrimSpace(a.body) != `{"detail":"Not Found"}` {
			t.Errorf("%s %s: %d %s", r.method, r.path, a.status, a.body)
		}
	}
	if gpu.Users("vllm") != 1 {
		t.Fatal("a refused sleep freed memory")
	}
	if a := <-goChat(t, srv, false); a.status != 200 {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
}

// POST /sleep reads level and mode from the query (defaults 1 and abort)
// and ignores the body; it answers 200 with an empty body only once the
// engine sleeps; level 0 keeps the memory, 1 and 2 free it; a level or
// mode vLLM rejects is a 500.
func TestSleepLevelsAndTheirAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		fact, query, body string
		status            int
		freed             bool
	}{
		{"defaults: level 1, abort", "", "", 200, true},
		{"the body is ignored", "", `{"level":0}`, 200, true},
		{"level 0 keeps the memory", "?level=0&mode=wait", "", 200, false},
		{"level 1", "?level=1&mode=wait", "", 200, true},
		{"level 2", "?level=2&mode=keep", "", 200, true},
		{"a level that is no number", "?level=one", "", 500, false},
		{"an unknown mode", "?mode=later", "", 500, false},
	} {
		srv, gpu := newFake(t, vllmtest.Options{})
		a := send(t, http.MethodPost, srv.URL()+"/sleep"+tc.query, tc.body)
		freed := gpu.Users("vllm") == 0
		if a.status != tc.status || freed != tc.freed || (a.status == 200 && (a.body != "" || !srv.Sleeping())) {
			t.Errorf("%s: %d %q, freed %v, sleeping %v; want %d, freed %v", tc.fact, a.status, a.body, freed, srv.Sleeping(), tc.status, tc.freed)
		}
	}
}

// Some builds answer /sleep with JSON: a client must go by the status.
func TestJSONSleepAnswer(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, vllmtest.Options{JSONSleepAnswer: true})
	a := send(t, http.MethodPost, srv.URL()+"/sleep?level=1", "")
	var v struct {
		Status string
		Level  int
	}
	if a.status != 200 || json.Unmarshal([]byte(a.body), &v) != nil || v.Status != "sleeping" || v.Level != 1 {
		t.Fatalf("/sleep: %d %s", a.status, a.body)
	}
}

// Requests that arrive while vLLM sleeps are accepted and queued: they hang
// (vLLM never wakes by itself) until /wake_up, which answers 200 empty once
// the memory is back ("wake"), and are then served.
func TestRequestsWhileAsleepQueueUntilTheWake(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, vllmtest.Options{})
	if a := send(t, http.MethodPost, srv.URL()+"/sleep?level=1&mode=wait", ""); a.status != 200 {
		t.Fatalf("sleep: %d %s", a.status, a.body)
	}
	chat := goChat(t, srv, false)
	waitEvent(t, gpu, 0, "queued /v1/chat/completions")
	if srv.Queued() != 1 || !srv.Sleeping() || !never(gpu, "finished", 100*time.Millisecond) {
		t.Fatalf("queued %d, sleeping %v: a request sent while asleep must hang", srv.Queued(), srv.Sleeping())
	}
	a := send(t, http.MethodPost, srv.URL()+"/wake_up", "")
	if a.status != 200 || a.body != "" || gpu.Users("vllm") != 1 || srv.Sleeping() {
		t.Fatalf("wake_up: %d %q, %d users, sleeping %v", a.status, a.body, gpu.Users("vllm"), srv.Sleeping())
	}
	waitEvent(t, gpu, 0, "wake")
	if c := <-chat; c.status != 200 || !strings.Contains(c.body, `"finish_reason":"stop"`) || srv.Queued() != 0 {
		t.Fatalf("the queued request after the wake: %d %s", c.status, c.body)
	}
	if srv.Sleeps() != 1 || srv.Wakes() != 1 || srv.Requests() != 1 {
		t.Fatalf("counted %d sleeps, %d wakes, %d requests", srv.Sleeps(), srv.Wakes(), srv.Requests())
	}
}

// Scheduling resumes only once all the memory is back: a wake of the
// weights alone leaves /is_sleeping true and the requests queued.
func TestPartialWakeKeepsSchedulingPaused(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, vllmtest.Options{})
	send(t, http.MethodPost, srv.URL()+"/sleep?level=1", "")
	chat := goChat(t, srv, false)
	waitEvent(t, gpu, 0, "queued")
	send(t, http.MethodPost, srv.URL()+"/wake_up?tags=weights", "")
	if gpu.Users("vllm") != 1 || !srv.Sleeping() || srv.Queued() != 1 {
		t.Fatalf("after waking the weights: %d users, sleeping %v, queued %d", gpu.Users("vllm"), srv.Sleeping(), srv.Queued())
	}
	send(t, http.MethodPost, srv.URL()+"/wake_up?tags=kv_cache", "")
	if c := <-chat; c.status != 200 || srv.Sleeping() {
		t.Fatalf("after waking the KV cache: %d %s, sleeping %v", c.status, c.body, srv.Sleeping())
	}
}

// After a level-2 sleep the weights come back empty: the fake answers with
// garbage until collective_rpc reload_weights.
func TestLevelTwoWakesWithEmptyWeights(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, vllmtest.Options{Tokens: 2})
	send(t, http.MethodPost, srv.URL()+"/sleep?level=2", "")
	send(t, http.MethodPost, srv.URL()+"/wake_up", "")
	if c := <-goChat(t, srv, false); c.status != 200 || !strings.Contains(c.body, `"content":"!!"`) {
		t.Fatalf("after a level-2 wake: %d %s, want garbage", c.status, c.body)
	}
	a := send(t, http.MethodPost, srv.URL()+"/collective_rpc", `{"method":"reload_weights"}`)
	if a.status != 200 || strings.TrimSpace(a.body) != `{"results":[null]}` {
		t.Fatalf("reload_weights: %d %s", a.status, a.body)
	}
	if c := <-goChat(t, srv, false); !strings.Contains(c.body, `"content":"tok0 tok1 "`) {
		t.Fatalf("after reload_weights: %s", c.body)
	}
}
