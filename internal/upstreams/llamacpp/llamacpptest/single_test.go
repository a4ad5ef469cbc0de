package llamacpptest_test

import (
	"context"
	"encoding/json"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

const loadingBody = `{"error":{"message":"Loading model","type":"unavailable_error","code":503}}`

// Fact: a single-model server is up before its model has loaded, and until
// then every route, /health and unknown paths included, answers 503
// "Loading model" (/ and *.html an HTML page, also 503); its memory is in
// use from the start.
func TestSingleModelAnswers503UntilLoaded(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{Single: qwen, LoadDelay: time.Hour})
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/health", ""}, {"GET", "/v1/health", ""}, {"GET", "/props", ""}, {"GET", "/models", ""},
		{"GET", "/slots", ""}, {"POST", "/v1/chat/completions", chat(qwen, false)}, {"GET", "/nope", ""},
		{"POST", "/models/unload", modelBody(qwen)},
	} {
		wantAnswer(t, tc.method+" "+tc.path, do(t, tc.method, srv.URL()+tc.path, tc.body), 503, loadingBody)
	}
	if a := get(t, srv, "/"); a.status != 503 || a.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET / while loading: %d %q", a.status, a.header.Get("Content-Type"))
	}
	if gpu.Users("llamacpp") != 1 {
		t.Fatal("a loading single-model server holds no memory")
	}
}

// Fact: once loaded, /health is 200 {"status":"ok"}; /props has no
// "router" role and shows is_sleeping; /models lists the one model;
// /models/load and /models/unload do not exist (404 File Not Found).
func TestSingleModelOnceLoaded(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{Single: qwen})
	waitStatus(t, srv, gpu, qwen, "loaded")
	wantAnswer(t, "health", get(t, srv, "/health"), 200, `{"status":"ok"}`)
	var props map[string]any
	a := get(t, srv, "/props")
	if err := json.Unmarshal([]byte(a.body), &props); err != nil || props["role"] != nil || props["is_sleeping"] != false {
		t.Fatalf("/props: %d %s; want no role and is_sleeping false", a.status, a.body)
	}
	var models struct{ Data []map[string]any }
	a = get(t, srv, "/v1/models")
	if err := json.Unmarshal([]byte(a.body), &models); err != nil || len(models.Data) != 1 || models.Data[0]["id"] != qwen {
		t.Fatalf("/v1/models: %d %s; want the one model", a.status, a.body)
	}
	notFound := `{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`
	wantAnswer(t, "load", post(t, srv, "/models/load", modelBody(qwen)), 404, notFound)
	wantAnswer(t, "unload", post(t, srv, "/models/unload", modelBody(qwen)), 404, notFound)
	if a := post(t, srv, "/v1/chat/completions", chat("any-name", false)); a.status != 200 {
		t.Fatalf("chat: %d %s; a single-model server serves whatever model is named", a.status, a.body)
	}
}

// Fact: with --sleep-idle-seconds the model is freed after that idle time
// (the process stays, /props shows is_sleeping:true), /health, /props and
// /models do not wake it, and the next model request blocks for a full
// reload, then is served.
func TestSingleModelSleepsWhenIdleAndReloadsOnDemand(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{Single: qwen, SleepIdle: 30 * time.Millisecond})
	waitStatus(t, srv, gpu, qwen, "sleeping")
	wantAnswer(t, "health while asleep", get(t, srv, "/health"), 200, `{"status":"ok"}`)
	get(t, srv, "/models")
	var props struct {
		IsSleeping bool `json:"is_sleeping"`
	}
	if a := get(t, srv, "/props"); json.Unmarshal([]byte(a.body), &props) != nil || !props.IsSleeping {
		t.Fatalf("/props while asleep: %s", a.body)
	}
	if srv.Status(qwen) != "sleeping" || gpu.Users("llamacpp") != 0 || srv.Loads() != 1 {
		t.Fatalf("after /health, /models, /props: %s, %d users, %d loads; want asleep and free", srv.Status(qwen), gpu.Users("llamacpp"), srv.Loads())
	}
	if a := post(t, srv, "/v1/chat/completions", chat(qwen, false)); a.status != 200 {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
	ev := gpu.Events()
	reload, awake := gputest.Index(ev, 0, "llamacpp", "reload "+qwen), gputest.Index(ev, 0, "llamacpp", "awake "+qwen)
	req := gputest.Index(ev, 0, "llamacpp", "request /v1/chat/completions")
	if reload < 0 || awake < reload || req < awake || srv.Loads() != 2 {
		t.Fatalf("want reload < awake < request, 2 loads (%d):\n%s", srv.Loads(), gputest.Dump(ev))
	}
}

// Fact: GET /slots and /metrics are tasks: they restart the idle timer,
// and they wake a sleeping model (so polling them to check state keeps
// the model loaded).
func TestSingleModelSlotsAndMetricsWakeIt(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{Single: qwen, SleepIdle: 30 * time.Millisecond})
	for i, path := range []string{"/slots", "/metrics"} {
		waitStatus(t, srv, gpu, qwen, "sleeping")
		if a := get(t, srv, path); a.status != 200 || srv.Loads() != int64(i+2) {
			t.Fatalf("GET %s while asleep: %d, %d loads; want it served after a reload", path, a.status, srv.Loads())
		}
	}
}

// Fact: a failed reload aborts a single-model server (GGML_ABORT): the
// request is cut and the port refuses connections from then on.
func TestSingleModelFailedReloadAborts(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{Single: qwen, SleepIdle: 30 * time.Millisecond})
	waitStatus(t, srv, gpu, qwen, "sleeping")
	srv.FailNextLoad(qwen)
	if a, err := tryDo(context.Background(), "POST", srv.URL()+"/v1/chat/completions", chat(qwen, false)); err == nil {
		t.Fatalf("a request during the failed reload was answered: %d %s", a.status, a.body)
	}
	waitEvent(t, gpu, "process aborted")
	if _, err := tryDo(context.Background(), "GET", srv.URL()+"/health", ""); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after the abort: %v, want connection refused", err)
	}
	if gpu.Users("llamacpp") != 0 {
		t.Fatal("an aborted server holds memory")
	}
}

// Fact: a single-model server whose first load fails exits: its port
// refuses connections.
func TestSingleModelFailedLoadEndsTheServer(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{Single: qwen, LoadDelay: 100 * time.Millisecond})
	srv.FailNextLoad(qwen)
	waitEvent(t, gpu, "process aborted")
	if _, err := tryDo(context.Background(), "GET", srv.URL()+"/health", ""); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after the failed load: %v, want connection refused", err)
	}
	if gpu.Users("llamacpp") != 0 || srv.Status(qwen) != "unloaded" {
		t.Fatalf("after the failed load: %d users, %s", gpu.Users("llamacpp"), srv.Status(qwen))
	}
}
