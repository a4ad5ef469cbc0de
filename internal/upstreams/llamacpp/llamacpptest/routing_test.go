package llamacpptest_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

// Fact: model routes take the model from the JSON body's "model" (POST)
// or ?model= (GET): a missing one is 400 "model name is missing from the
// request", an unknown one 400 "model 'x' not found".
func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamacpptest.Options{})
	missing := envelope(400, "model name is missing from the request", "invalid_request_error")
	for _, tc := range []struct {
		method, path, body string
		want               string
	}{
		{"POST", "/v1/chat/completions", `{"messages":[]}`, missing},
		{"POST", "/completion", `{"model":42}`, missing},
		{"GET", "/slots", "", missing},
		{"POST", "/v1/chat/completions", modelBody("nope"), envelope(400, "model 'nope' not found", "invalid_request_error")},
		{"GET", "/slots?model=nope", "", envelope(400, "model 'nope' not found", "invalid_request_error")},
	} {
		wantAnswer(t, tc.method+" "+tc.path+" "+tc.body, do(t, tc.method, srv.URL()+tc.path, tc.body), 400, tc.want)
	}
	if srv.Loads() != 0 || srv.Requests() != 0 {
		t.Fatal("a refused request loaded or reached a model")
	}
}

// Fact: with autoload on (the default), a request for an unloaded model
// loads it, and the request blocks until the model is no longer loading.
func TestAutoloadBlocksTheRequestUntilLoaded(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{LoadDelay: 100 * time.Millisecond})
	if a := post(t, srv, "/v1/chat/completions", chat(qwen, false)); a.status != 200 {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
	ev := gpu.Events()
	ready, req := gputest.Index(ev, 0, "llamacpp", "ready "+qwen), gputest.Index(ev, 0, "llamacpp", "request /v1/chat/completions "+qwen)
	if ready < 0 || req < ready || srv.Loads() != 1 || srv.Requests() != 1 {
		t.Fatalf("want the load, then the request; %d loads, %d requests:\n%s", srv.Loads(), srv.Requests(), gputest.Dump(ev))
	}
}

// Fact: GET /slots?model= is forwarded to the model's child, so it
// autoloads the model too.
func TestSlotsAutoloadsTheModel(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamacpptest.Options{})
	if a := get(t, srv, "/slots?model="+qwen); a.status != 200 || srv.Status(qwen) != "loaded" {
		t.Fatalf("GET /slots?model: %d %s, %s; want it served by a loaded model", a.status, a.body, srv.Status(qwen))
	}
}

// Fact: with --no-models-autoload, a request for a model that is not
// running is 400 "model is not loaded"; ?autoload=true|1 overrides it per
// request, and ?autoload=false turns autoload off per request.
func TestAutoloadOffAndPerRequest(t *testing.T) {
	t.Parallel()
	notLoaded := envelope(400, "model is not loaded", "invalid_request_error")
	off, _ := newFake(t, llamacpptest.Options{NoAutoload: true})
	wantAnswer(t, "no autoload", post(t, off, "/v1/chat/completions", chat(qwen, false)), 400, notLoaded)
	if a := post(t, off, "/v1/chat/completions?autoload=1", chat(qwen, false)); a.status != 200 {
		t.Fatalf("?autoload=1: %d %s", a.status, a.body)
	}
	on, _ := newFake(t, llamacpptest.Options{})
	wantAnswer(t, "?autoload=false", post(t, on, "/v1/chat/completions?autoload=false", chat(qwen, false)), 400, notLoaded)
	if on.Loads() != 0 {
		t.Fatal("?autoload=false loaded the model")
	}
}

// Fact (from the source): without autoload, a request for a model that is
// still loading is forwarded to its child, whose own middleware answers
// 503 "Loading model".
func TestNoAutoloadForwardsToALoadingChild(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamacpptest.Options{NoAutoload: true, LoadDelay: time.Hour})
	post(t, srv, "/models/load", modelBody(qwen))
	wantAnswer(t, "chat", post(t, srv, "/v1/chat/completions", chat(qwen, false)), 503,
		`{"error":{"message":"Loading model","type":"unavailable_error","code":503}}`)
}

// Fact: an unknown path, or a known path with another method, is 404
// {"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}
// (format_error_response's key order; the sheet writes the keys in
// another order).
func TestUnknownPathIsFileNotFound(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamacpptest.Options{})
	for _, tc := range []struct{ method, path string }{
		{"GET", "/nope"}, {"GET", "/v1/chat/completions"}, {"POST", "/health"}, {"GET", "/models/load"}, {"GET", "/api/ps"},
	} {
		wantAnswer(t, tc.method+" "+tc.path, do(t, tc.method, srv.URL()+tc.path, ""), 404,
			`{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`)
	}
}

// Fact: a request for a sleeping model is forwarded at once and the child
// wakes itself (reloading, and occupying the GPU again); GET /props and
// /models do not wake it.
func TestSleepingChildWakesForARequest(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{SleepIdle: 30 * time.Millisecond})
	post(t, srv, "/models/load", modelBody(qwen))
	waitStatus(t, srv, gpu, qwen, "sleeping")
	get(t, srv, "/props")
	if e := listModels(t, srv)[qwen]; e.Status.Value != "sleeping" || gpu.Users("llamacpp") != 0 {
		t.Fatalf("sleeping model: %q, %d users; want sleeping, free, not woken by /props or /models", e.Status.Value, gpu.Users("llamacpp"))
	}
	if a := post(t, srv, "/v1/chat/completions", chat(qwen, false)); a.status != 200 {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
	ev := gpu.Events()
	reload, req := gputest.Index(ev, 0, "llamacpp", "reload "+qwen), gputest.Index(ev, 0, "llamacpp", "request /v1/chat/completions "+qwen)
	if reload < 0 || ev[reload].Users != 1 || req < reload || srv.Loads() != 1 {
		t.Fatalf("want a wake (no new child) before the request:\n%s", gputest.Dump(ev))
	}
}

// Fact: a request forwarded to a child told to exit fails with the
// router's proxy error (500, plain text); exactly when the child stops
// taking connections is UNVERIFIED.
func TestRequestToAnExitingChildIsAProxyError(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{StopDelay: time.Hour})
	post(t, srv, "/models/load", modelBody(qwen))
	waitStatus(t, srv, gpu, qwen, "loaded")
	post(t, srv, "/models/unload", modelBody(qwen))
	wantAnswer(t, "chat", post(t, srv, "/v1/chat/completions", chat(qwen, false)), http.StatusInternalServerError,
		"proxy error: Could not establish connection")
}
