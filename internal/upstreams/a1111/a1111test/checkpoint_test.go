package a1111test_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

const sdxl = "sd_xl_base_1.0.safetensors [31e35c80fc]"

// A1111 loads its checkpoint at launch: it is on the GPU from start-up.
// With NotLoadedAtStart the first generation loads it, within its job.
func TestCheckpointOnTheGPUFromStartUpUnlessNotLoaded(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{})
	if !srv.OnGPU() || gpu.Users("a1111") != 1 || gputest.Index(gpu.Events(), 0, "a1111", "checkpoint on GPU") != 0 {
		t.Fatalf("at start: on GPU %v, users %d:\n%s", srv.OnGPU(), gpu.Users("a1111"), gputest.Dump(gpu.Events()))
	}
	srv, gpu = newFake(t, a1111test.Options{NotLoadedAtStart: true})
	if srv.OnGPU() || gpu.Users("a1111") != 0 {
		t.Fatal("NotLoadedAtStart, yet the checkpoint is on the GPU")
	}
	if a := post(t, srv.URL()+"/sdapi/v1/txt2img", txt2img); a.status != 200 {
		t.Fatalf("txt2img: %d %s", a.status, a.body)
	}
	ev := gpu.Events()
	start, load := gputest.Index(ev, 0, "a1111", "job 1 txt2img start"), gputest.Index(ev, 0, "a1111", "checkpoint on GPU")
	if load < start || !srv.OnGPU() {
		t.Fatalf("the first job did not load the checkpoint within itself:\n%s", gputest.Dump(ev))
	}
}

// A1111's unload moves the model to the CPU and answers 200 {} once done;
// nothing brings it back but reload-checkpoint: a txt2img meanwhile fails
// visibly (500 in A1111's error shape; the exact failure is UNVERIFIED),
// and an options call naming the same checkpoint does not reload it.
func TestA1111UnloadLeavesTheModelOnTheCPUUntilReload(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{})
	if a := post(t, srv.URL()+"/sdapi/v1/unload-checkpoint", ""); a.status != 200 || a.body != "{}" {
		t.Fatalf("unload: %d %s, want 200 {}", a.status, a.body)
	}
	if srv.OnGPU() || gpu.Users("a1111") != 0 || srv.Unloads() != 1 {
		t.Fatal("unload answered before the checkpoint left the GPU")
	}
	waitEvent(t, gpu, 0, "checkpoint off GPU: moved to CPU")
	a := post(t, srv.URL()+"/sdapi/v1/txt2img", txt2img)
	e := decode(t, a.body)
	if a.status != 500 || len(e) != 4 || e["error"] != "RuntimeError" || e["detail"] != "" || e["body"] != "" ||
		!strings.Contains(e["errors"].(string), "same device") {
		t.Fatalf("txt2img after unload: %d %s, want a 500 device error in A1111's shape", a.status, a.body)
	}
	waitEvent(t, gpu, 0, "job 1 txt2img fails: the checkpoint is on the CPU")
	if a := post(t, srv.URL()+"/sdapi/v1/options", `{"sd_model_checkpoint":"v1-5-pruned-emaonly"}`); a.status != 200 || a.body != "null" {
		t.Fatalf("options: %d %s, want 200 null", a.status, a.body)
	}
	if srv.OnGPU() || gpu.Users("a1111") != 0 {
		t.Fatal("a job or an unchanged option brought the checkpoint back")
	}
	if a := post(t, srv.URL()+"/sdapi/v1/reload-checkpoint", ""); a.status != 200 || a.body != "{}" {
		t.Fatalf("reload: %d %s, want 200 {}", a.status, a.body)
	}
	if !srv.OnGPU() || gpu.Users("a1111") != 1 || srv.Reloads() != 1 {
		t.Fatal("reload answered before the checkpoint was back on the GPU")
	}
	if a := post(t, srv.URL()+"/sdapi/v1/txt2img", txt2img); a.status != 200 {
		t.Fatalf("txt2img after reload: %d %s", a.status, a.body)
	}
}

// Forge's unload frees everything; its reload is a no-op; its next
// generation loads the model back by itself, within the job.
func TestForgeReloadsByItselfAtTheNextGeneration(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{Forge: true})
	post(t, srv.URL()+"/sdapi/v1/unload-checkpoint", "")
	waitEvent(t, gpu, 0, "checkpoint off GPU: freed")
	if a := post(t, srv.URL()+"/sdapi/v1/reload-checkpoint", ""); a.status != 200 || a.body != "{}" {
		t.Fatalf("reload: %d %s, want 200 {}", a.status, a.body)
	}
	if srv.OnGPU() || gpu.Users("a1111") != 0 {
		t.Fatal("Forge's reload-checkpoint loaded the checkpoint")
	}
	from := len(gpu.Events())
	if a := post(t, srv.URL()+"/sdapi/v1/txt2img", txt2img); a.status != 200 {
		t.Fatalf("txt2img: %d %s", a.status, a.body)
	}
	ev := gpu.Events()
	start := gputest.Index(ev, from, "a1111", "job 1 txt2img start")
	load := gputest.Index(ev, from, "a1111", "checkpoint on GPU")
	end := gputest.Index(ev, from, "a1111", "job 1 txt2img end: finished")
	if start < 0 || load < start || end < load || !srv.OnGPU() {
		t.Fatalf("the generation did not load the checkpoint itself:\n%s", gputest.Dump(ev[from:]))
	}
}

// unload-checkpoint is not under the queue lock: sent during a job it
// answers at once and acts during the job, which is on the timeline. The
// job loses its model and fails; its tensors hold memory until it ends.
func TestUnloadDuringAJobActsDuringIt(t *testing.T) {
	t.Parallel()
	for _, forge := range []bool{false, true} {
		srv, gpu := newFake(t, a1111test.Options{Forge: forge, JobDuration: 3 * time.Second})
		resume := srv.HoldJobs()
		res := postAsync(srv.URL()+"/sdapi/v1/txt2img", txt2img)
		waitEvent(t, gpu, 0, "job 1 txt2img held")
		if a := post(t, srv.URL()+"/sdapi/v1/unload-checkpoint", ""); a.status != 200 || a.body != "{}" {
			t.Fatalf("forge=%v: unload during a job: %d %s", forge, a.status, a.body)
		}
		ev := gpu.Events()
		if gputest.Index(ev, 0, "a1111", "unload-checkpoint during job 1 txt2img") < 0 || gputest.Index(ev, 0, "a1111", "job 1 txt2img end") >= 0 {
			t.Fatalf("forge=%v: the unload did not act during the job:\n%s", forge, gputest.Dump(ev))
		}
		if gpu.Users("a1111") != 1 {
			t.Fatalf("forge=%v: the job's memory was released while it ran", forge)
		}
		if a := recv(t, res); a.status != 500 || !strings.Contains(a.body, `"error":"RuntimeError"`) {
			t.Fatalf("forge=%v: the job that lost its model: %d %s", forge, a.status, a.body)
		}
		ev = gpu.Events()
		if gputest.Index(ev, gputest.Index(ev, 0, "a1111", "job 1 txt2img end"), "a1111", "checkpoint off GPU") < 0 || gpu.Users("a1111") != 0 {
			t.Fatalf("forge=%v: the memory was not released at the job's end:\n%s", forge, gputest.Dump(ev))
		}
		resume()
	}
}

// reload-checkpoint is not under the queue lock either: during a job it
// answers at once, and the timeline shows it.
func TestReloadDuringAJobIsOnTheTimeline(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{})
	resume := srv.HoldJobs()
	res := postAsync(srv.URL()+"/sdapi/v1/txt2img", txt2img)
	waitEvent(t, gpu, 0, "job 1 txt2img held")
	if a := post(t, srv.URL()+"/sdapi/v1/reload-checkpoint", ""); a.status != 200 {
		t.Fatalf("reload during a job: %d %s", a.status, a.body)
	}
	waitEvent(t, gpu, 0, "reload-checkpoint during job 1 txt2img")
	resume()
	if a := recv(t, res); a.status != 200 {
		t.Fatalf("txt2img: %d %s", a.status, a.body)
	}
}

// POST /sdapi/v1/options itself is not under the lock, but a changed
// sd_model_checkpoint runs wrap_queued_call(reload_model_weights)
// (A1111 initialize_util.configure_opts_onchange): it waits for the
// queue lock behind the running job, then loads the checkpoint onto the
// GPU (here after an unload), and answers null. An unknown checkpoint is
// a RuntimeError.
func TestOptionsCheckpointChangeLoadsItAfterTheQueue(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{})
	post(t, srv.URL()+"/sdapi/v1/unload-checkpoint", "")
	resume := srv.HoldJobs()
	go call(context.Background(), http.MethodPost, srv.URL()+"/sdapi/v1/extra-single-image", `{"image":"`+img+`"}`)
	waitEvent(t, gpu, 0, "job 1 extras held")
	res := postAsync(srv.URL()+"/sdapi/v1/options", `{"sd_model_checkpoint":"sd_xl_base_1.0"}`)
	waitEvent(t, gpu, 0, "options: checkpoint change to "+sdxl+" waits for the queue lock")
	resume()
	if a := recv(t, res); a.status != 200 || a.body != "null" {
		t.Fatalf("options: %d %s, want 200 null", a.status, a.body)
	}
	ev := gpu.Events()
	if load := gputest.Index(ev, 0, "a1111", "checkpoint on GPU: "+sdxl); load < gputest.Index(ev, 0, "a1111", "job 1 extras end") || !srv.OnGPU() {
		t.Fatalf("the checkpoint change did not load after the job:\n%s", gputest.Dump(ev))
	}
	if got := getJSON(t, srv.URL()+"/sdapi/v1/options")["sd_model_checkpoint"]; got != sdxl {
		t.Fatalf("option %v", got)
	}
	a := post(t, srv.URL()+"/sdapi/v1/options", `{"sd_model_checkpoint":"nope"}`)
	if e := decode(t, a.body); a.status != 500 || e["error"] != "RuntimeError" || e["errors"] != "model 'nope' not found" {
		t.Fatalf("unknown checkpoint: %d %s", a.status, a.body)
	}
}

// A txt2img whose override_settings names a checkpoint loads it for the
// job; the next job without an override reloads the option's checkpoint
// (processing.process_images calls reload_model_weights either way).
func TestOverrideSettingsSwitchesTheCheckpointForTheJob(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{})
	a := post(t, srv.URL()+"/sdapi/v1/txt2img", `{"prompt":"x","override_settings":{"sd_model_checkpoint":"sd_xl_base_1.0"}}`)
	if a.status != 200 || !strings.Contains(decode(t, a.body)["info"].(string), `"sd_model_name":"sd_xl_base_1.0"`) {
		t.Fatalf("txt2img with an override: %d %s", a.status, a.body)
	}
	waitEvent(t, gpu, 0, "switch checkpoint v1-5-pruned-emaonly.safetensors [6ce0161689] to "+sdxl)
	post(t, srv.URL()+"/sdapi/v1/txt2img", txt2img)
	waitEvent(t, gpu, 0, "switch checkpoint "+sdxl+" to v1-5")
}
