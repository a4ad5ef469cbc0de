package llamacpptest_test

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

// Fact: the router's GET /health is 200 {"status":"ok"} always: it has
// no model of its own, so it says nothing about the models.
func TestRouterHealthIsAlwaysOK(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{LoadDelay: time.Hour})
	wantAnswer(t, "health, nothing loaded", get(t, srv, "/health"), 200, `{"status":"ok"}`)
	post(t, srv, "/models/load", modelBody(qwen))
	waitEvent(t, gpu, "load "+qwen)
	wantAnswer(t, "health, a model loading", get(t, srv, "/health"), 200, `{"status":"ok"}`)
}

// Fact: GET /props without ?model is the router's own,
// {"role":"router","max_instances":N,"models_autoload":B,...} with N the
// --models-max value (0: no limit), and it loads nothing.
func TestRouterProps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		opts     llamacpptest.Options
		max      int
		autoload bool
	}{
		{llamacpptest.Options{}, 4, true},
		{llamacpptest.Options{ModelsMax: -1, NoAutoload: true}, 0, false},
		{llamacpptest.Options{ModelsMax: 2}, 2, true},
	} {
		srv, _ := newFake(t, tc.opts)
		a := get(t, srv, "/props")
		var p struct {
			Role           string `json:"role"`
			MaxInstances   *int   `json:"max_instances"`
			ModelsAutoload *bool  `json:"models_autoload"`
		}
		if err := json.Unmarshal([]byte(a.body), &p); err != nil || a.status != 200 || p.Role != "router" ||
			p.MaxInstances == nil || *p.MaxInstances != tc.max || p.ModelsAutoload == nil || *p.ModelsAutoload != tc.autoload {
			t.Errorf("%+v: /props %d %s, want role router, max_instances %d, models_autoload %v", tc.opts, a.status, a.body, tc.max, tc.autoload)
		}
		if srv.Loads() != 0 {
			t.Errorf("/props loaded a model")
		}
	}
}

// Fact: GET /models and /v1/models list every model with llama.cpp's
// entry shape, sorted by id, in {"data":[...],"object":"list"}; an entry
// has exit_code and failed only when it failed.
func TestModelsListsEveryModelInLlamaCppsShape(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamacpptest.Options{})
	for _, path := range []string{"/models", "/v1/models"} {
		a := get(t, srv, path)
		var out struct {
			Object string           `json:"object"`
			Data   []map[string]any `json:"data"`
		}
		if err := json.Unmarshal([]byte(a.body), &out); err != nil || a.status != 200 || out.Object != "list" || len(out.Data) != 2 {
			t.Fatalf("%s: %d %s", path, a.status, a.body)
		}
		if out.Data[0]["id"] != gemma || out.Data[1]["id"] != qwen {
			t.Errorf("%s: ids %v, %v; want them sorted", path, out.Data[0]["id"], out.Data[1]["id"])
		}
		e := out.Data[0]
		for key, want := range map[string]any{"object": "model", "owned_by": "llamacpp", "source": "models_dir", "can_remove": false} {
			if e[key] != want {
				t.Errorf("%s: %s = %v, want %v", path, key, e[key], want)
			}
		}
		for _, key := range []string{"aliases", "tags", "created", "architecture"} {
			if _, ok := e[key]; !ok {
				t.Errorf("%s: entry has no %q: %v", path, key, e)
			}
		}
		st, _ := e["status"].(map[string]any)
		if _, args := st["args"].([]any); st["value"] != "unloaded" || !args {
			t.Errorf("%s: status %v, want value unloaded and args", path, st)
		}
		if _, ok := st["failed"]; ok {
			t.Errorf("%s: a model that never failed has failed: %v", path, st)
		}
		arch, _ := e["architecture"].(map[string]any)
		if in, _ := arch["input_modalities"].([]any); len(in) == 0 || in[0] != "text" {
			t.Errorf("%s: architecture %v", path, arch)
		}
	}
}

// Fact: POST /models/load answers 200 {"success":true} at once, while the
// model is still loading (the load is asynchronous); the child holds video
// memory from its spawn.
func TestLoadAnswersWhileTheModelLoads(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{LoadDelay: 200 * time.Millisecond})
	wantAnswer(t, "load", post(t, srv, "/models/load", modelBody(qwen)), 200, `{"success":true}`)
	if st := srv.Status(qwen); st != "loading" || gpu.Users("llamacpp") != 1 {
		t.Fatalf("right after the load's answer: %s, %d users; want loading and resident", st, gpu.Users("llamacpp"))
	}
	if e := listModels(t, srv)[qwen]; e.Status.Value != "loading" {
		t.Fatalf("/models says %q while it loads", e.Status.Value)
	}
	waitStatus(t, srv, gpu, qwen, "loaded")
}

// Fact: /models/load of an unknown model is 404 "model is not found"; of a
// model loaded or loading, 400 "model is already running".
func TestLoadErrors(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{LoadDelay: 100 * time.Millisecond})
	wantAnswer(t, "unknown", post(t, srv, "/models/load", modelBody("nope")), 404, envelope(404, "model is not found", "not_found_error"))
	post(t, srv, "/models/load", modelBody(qwen))
	running := envelope(400, "model is already running", "invalid_request_error")
	wantAnswer(t, "loading", post(t, srv, "/models/load", modelBody(qwen)), 400, running)
	waitStatus(t, srv, gpu, qwen, "loaded")
	wantAnswer(t, "loaded", post(t, srv, "/models/load", modelBody(qwen)), 400, running)
}

// Fact: at --models-max, a load first unloads the least recently used
// model (LRU: the oldest load or POST request) and blocks until that one
// is unloaded; only then is the new child spawned and the load answered.
func TestLoadAtModelsMaxEvictsTheLeastRecentlyUsedAndWaits(t *testing.T) {
	t.Parallel()
	const third = "llama-3.2-1b"
	srv, gpu := newFake(t, llamacpptest.Options{Models: []string{qwen, gemma, third}, ModelsMax: 2, StopDelay: 100 * time.Millisecond})
	for _, m := range []string{qwen, gemma} {
		post(t, srv, "/models/load", modelBody(m))
		waitStatus(t, srv, gpu, m, "loaded")
	}
	// A POST request makes qwen, loaded first, the most recently used.
	if a := post(t, srv, "/v1/chat/completions", chat(qwen, false)); a.status != 200 {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
	wantAnswer(t, "load at the limit", post(t, srv, "/models/load", modelBody(third)), 200, `{"success":true}`)
	if st := srv.Status(gemma); st != "unloaded" {
		t.Fatalf("the load answered while the evicted model is %s", st)
	}
	ev := gpu.Events()
	exit, load := gputest.Index(ev, 0, "llamacpp", "exit "+gemma), gputest.Index(ev, 0, "llamacpp", "load "+third)
	if exit < 0 || load < exit || srv.Status(qwen) != "loaded" {
		t.Fatalf("want gemma (least recently used) gone before the new load, qwen kept:\n%s", gputest.Dump(ev))
	}
}

// Fact: if the limit is still reached once the eviction is done (another
// load took the place), the load is 500 "model limit reached, try again
// later".
func TestLoadFailsWhenTheLimitIsStillReached(t *testing.T) {
	t.Parallel()
	const third = "llama-3.2-1b"
	srv, gpu := newFake(t, llamacpptest.Options{Models: []string{qwen, gemma, third}, ModelsMax: 1, StopDelay: 400 * time.Millisecond})
	post(t, srv, "/models/load", modelBody(qwen))
	waitStatus(t, srv, gpu, qwen, "loaded")
	var wg sync.WaitGroup
	answers := make([]answer, 2)
	for i, m := range []string{gemma, third} {
		wg.Go(func() { answers[i] = post(t, srv, "/models/load", modelBody(m)) })
	}
	// Both wait for the same eviction.
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return count(ev, "evict "+qwen) == 2 }) {
		t.Fatalf("the loads did not both evict:\n%s", gputest.Dump(gpu.Events()))
	}
	wg.Wait()
	statuses := []int{answers[0].status, answers[1].status}
	slices.Sort(statuses)
	limit := envelope(500, "model limit reached, try again later", "server_error")
	if statuses[0] != 200 || statuses[1] != 500 || (answers[0].body != limit && answers[1].body != limit) {
		t.Fatalf("answers %+v, want one 200 and one %s", answers, limit)
	}
}

// Fact: /models/unload of an unknown model is 400 (not 404) "model is not
// found"; of one not running, 400 "model is not running".
func TestUnloadErrors(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamacpptest.Options{})
	wantAnswer(t, "unknown", post(t, srv, "/models/unload", modelBody("nope")), 400, envelope(400, "model is not found", "invalid_request_error"))
	wantAnswer(t, "not running", post(t, srv, "/models/unload", modelBody(qwen)), 400, envelope(400, "model is not running", "invalid_request_error"))
	if srv.Unloads() != 0 {
		t.Fatalf("refused unloads counted: %d", srv.Unloads())
	}
}
