package llamacpptest_test

import (
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

// Fact: /models/unload answers 200 {"success":true} at once and is
// asynchronous: the model stays "loaded", and its child holds its memory,
// until the child exits StopDelay later; only then is it "unloaded".
func TestUnloadAnswersAtOnceAndTheStatusTurnsAtExit(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{StopDelay: 300 * time.Millisecond})
	post(t, srv, "/models/load", modelBody(qwen))
	waitStatus(t, srv, gpu, qwen, "loaded")
	wantAnswer(t, "unload", post(t, srv, "/models/unload", modelBody(qwen)), 200, `{"success":true}`)
	if e := listModels(t, srv)[qwen]; e.Status.Value != "loaded" || gpu.Users("llamacpp") != 1 {
		t.Fatalf("right after the unload's answer: %q, %d users; want loaded and resident", e.Status.Value, gpu.Users("llamacpp"))
	}
	waitEvent(t, gpu, "exit "+qwen)
	e := listModels(t, srv)[qwen]
	if e.Status.Value != "unloaded" || e.Status.Failed != nil || gpu.Users("llamacpp") != 0 || srv.Unloads() != 1 {
		t.Fatalf("after the exit: %+v, %d users, %d unloads; want unloaded, not failed, free", e.Status, gpu.Users("llamacpp"), srv.Unloads())
	}
}

// Fact: a child that is still loading is killed at once by an unload; the
// router then reads a non-zero exit (sheredom subprocess_join gives
// EXIT_FAILURE for a signal), so the model is unloaded with failed:true.
func TestUnloadWhileLoadingKillsTheChildAtOnce(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{LoadDelay: time.Hour, StopDelay: time.Hour})
	post(t, srv, "/models/load", modelBody(qwen))
	wantAnswer(t, "unload", post(t, srv, "/models/unload", modelBody(qwen)), 200, `{"success":true}`)
	waitStatus(t, srv, gpu, qwen, "unloaded")
	e := listModels(t, srv)[qwen]
	if e.Status.Failed == nil || !*e.Status.Failed || e.Status.ExitCode == nil || *e.Status.ExitCode != 1 || gpu.Users("llamacpp") != 0 {
		t.Fatalf("killed while loading: %+v, %d users; want failed:true, exit_code 1, free", e.Status, gpu.Users("llamacpp"))
	}
}

// Fact: a child that has not exited stop-timeout after its unload is
// killed (a failed exit).
func TestUnloadKillsAChildAtItsStopTimeout(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{StopDelay: time.Hour, StopTimeout: 50 * time.Millisecond})
	post(t, srv, "/models/load", modelBody(qwen))
	waitStatus(t, srv, gpu, qwen, "loaded")
	post(t, srv, "/models/unload", modelBody(qwen))
	waitEvent(t, gpu, "killed at stop-timeout "+qwen)
	if e := listModels(t, srv)[qwen]; e.Status.Value != "unloaded" || e.Status.Failed == nil || !*e.Status.Failed {
		t.Fatalf("after the stop timeout: %+v", e.Status)
	}
}

// Fact: a child that exits non-zero during its load leaves the model
// unloaded with failed:true and its exit_code, and a request that
// autoloaded it is 500 "model name=X failed to load".
func TestFailedLoad(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{})
	srv.FailNextLoad(qwen)
	wantAnswer(t, "chat", post(t, srv, "/v1/chat/completions", chat(qwen, false)), 500,
		envelope(500, "model name="+qwen+" failed to load", "server_error"))
	e := listModels(t, srv)[qwen]
	if e.Status.Value != "unloaded" || e.Status.Failed == nil || !*e.Status.Failed || e.Status.ExitCode == nil || *e.Status.ExitCode != 1 {
		t.Fatalf("after a failed load: %+v", e.Status)
	}
	if gpu.Users("llamacpp") != 0 {
		t.Fatal("a failed child still holds memory")
	}
	// The next load is a new child, and it loads.
	post(t, srv, "/models/load", modelBody(qwen))
	waitStatus(t, srv, gpu, qwen, "loaded")
	if e := listModels(t, srv)[qwen]; e.Status.Failed != nil {
		t.Fatalf("a loaded model still shows failed: %+v", e.Status)
	}
}

// Fact: each child occupies the GPU from its spawn until its exit, and a
// served request is on the timeline ("chat M served").
func TestChildOccupiesTheGPUFromSpawnUntilExit(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{})
	post(t, srv, "/v1/chat/completions", chat(qwen, false))
	post(t, srv, "/models/unload", modelBody(qwen))
	waitEvent(t, gpu, "exit "+qwen)
	ev := gpu.Events()
	load, ready := gputest.Index(ev, 0, "llamacpp", "load "+qwen), gputest.Index(ev, 0, "llamacpp", "ready "+qwen)
	served, exit := gputest.Index(ev, 0, "llamacpp", "chat "+qwen+" served"), gputest.Index(ev, 0, "llamacpp", "exit "+qwen)
	if load < 0 || ev[load].Users != 1 || ready < load || served < ready || exit < served || ev[exit].Users != 0 {
		t.Fatalf("want load (1 user) < ready < served < exit (0 users):\n%s", gputest.Dump(ev))
	}
}

// Fact: load-on-startup presets are loading as soon as the server is up
// (source "preset"), and more of them than the --models-max value is a
// startup error, even with --models-max 0 (no limit), as llama.cpp's
// check compares with the value itself.
func TestLoadOnStartup(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{LoadDelay: 100 * time.Millisecond, LoadOnStart: []string{qwen}})
	if st := srv.Status(qwen); st != "loading" {
		t.Fatalf("a load-on-startup model is %s at start", st)
	}
	if e := listModels(t, srv)[qwen]; e.Source != "preset" || e.Status.Preset == nil {
		t.Fatalf("a load-on-startup model's entry: %+v", e)
	}
	waitStatus(t, srv, gpu, qwen, "loaded")
	for _, opts := range []llamacpptest.Options{
		{LoadOnStart: []string{qwen, gemma}, ModelsMax: 1},
		{LoadOnStart: []string{qwen}, ModelsMax: -1},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%+v started", opts)
				}
			}()
			llamacpptest.NewServer(gputest.New(), opts).Close()
		}()
	}
}
