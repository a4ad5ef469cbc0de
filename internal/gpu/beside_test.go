package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// sendJob runs an image job of workflow on the fake ComfyUI through
// RunImage, which returns once the job is queued, and returns its
// prompt_id.
func (f *fixture) sendJob(t *testing.T, workflow string, d time.Duration) string {
	t.Helper()
	var id string
	_, err := f.g.RunImage(context.Background(), ImageRun{Deadline: time.Now().Add(10 * time.Second), Workflow: workflow,
		Forward: func(_ context.Context, fw *Forwarded) {
			id = f.comfy.Submit(d)
			fw.Status, fw.PromptID = 200, id
		}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// stopJob interrupts the job id on the fake ComfyUI once it has started
// (an interrupt before is dropped): a job the test ends when it has seen
// what it runs beside.
func (f *fixture) stopJob(t *testing.T, id string) {
	t.Helper()
	f.waitTimeline(t, "job "+id+" start", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "comfy", "job "+id+" start") >= 0
	})
	if err := f.clients.comfy.Interrupt(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

// besideSoon admits model beside the running job, trying again at each
// change for 10 s at most: a reading gone stale on a loaded machine
// refuses it for a moment (the whole-card rules), as it should.
func (f *fixture) besideSoon(t *testing.T, model string) *Admission {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		ch := f.g.Changed()
		if a := f.g.TryBeside(model); a != nil {
			return a
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s not admitted beside the job: %+v", model, f.g.Status().VRAM)
		}
	}
}

// A co_resident model runs beside a job whose workflow was measured (and
// never beside one that was not), when it fits next to the workflow's
// peak; a model that does not fit waits for the job's end.
func TestCoResidentBesideAMeasuredWorkflow(t *testing.T) {
	t.Parallel()
	card := gputest.New()
	card.ShareAmong("ollama", "comfy") // co-residency shares the card; over-commitment is what must not happen
	f := newMemFixtureWith(t, card, map[string]int64{"small": 4 * gib, "large": 14 * gib},
		comfytest.Options{JobBytes: 8 * gib},
		func(m *MemoryConfig) {
			m.Models["small"] = 4 * gib
			m.Models["large"] = 14 * gib
			m.CoResident = []string{"small", "large"}
		})
	running := func(st Status) bool { return st.State == "image" && st.VRAM.Job != nil }

	f.sendJob(t, "comfyui:sdxl@1024x1024x1", 400*time.Millisecond)
	f.waitState(t, "the first job running", func(st Status) bool { return running(st) && st.VRAM.FreeBytes == 16*gib })
	if a := f.g.TryBeside("small"); a != nil {
		t.Fatal("admitted beside a workflow never measured")
	}
	st := f.waitState(t, "the workflow's peak learned", func(st Status) bool {
		for _, fp := range st.VRAM.Footprints {
			if fp.Model == "comfyui:sdxl@1024x1024x1" {
				return true
			}
		}
		return false
	})
	for _, fp := range st.VRAM.Footprints {
		if fp.Model == "comfyui:sdxl@1024x1024x1" && (fp.Bytes != 8*gib || fp.Engine != "comfyui") {
			t.Fatalf("workflow footprint %+v, want 8 GiB on comfyui", fp)
		}
	}
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })

	f.sendJob(t, "comfyui:sdxl@1024x1024x1", 400*time.Millisecond)
	f.waitState(t, "the second job running", func(st Status) bool { return running(st) && st.VRAM.Job.PeakBytes == 8*gib })
	a := f.besideSoon(t, "small")
	if st := f.g.Status(); st.State != "image" || st.LLMInflight != 1 {
		t.Fatalf("status %+v, want image with one LLM request beside it", st)
	}
	f.loadModel(t, "small")
	if b := f.g.TryBeside("large"); b != nil {
		t.Fatal("large admitted beside the job: 24 GiB card, 8 GiB job, 4 GiB small, 14 GiB large")
	}
	if b := f.g.TryBeside("qwen3:8b"); b != nil {
		t.Fatal("a model not listed in co_resident admitted beside the job")
	}
	a.Done(200, nil)
	f.g.ReleaseLLM()
	f.waitState(t, "idle after the job", func(st Status) bool { return st.State == "idle" })
	if n := len(f.m.get(&f.m.coResident)); n != 1 {
		t.Fatalf("%d co-resident admissions counted, want 1", n)
	}
}

// A job whose model beside it outlives it leaves the GPU in LLM use: the
// next job waits for that request to end, and empties the model.
func TestCoResidentOutlivesTheJob(t *testing.T) {
	t.Parallel()
	card := gputest.New()
	card.ShareAmong("ollama", "comfy")
	f := newMemFixtureWith(t, card, map[string]int64{"small": 4 * gib},
		comfytest.Options{JobBytes: 8 * gib},
		func(m *MemoryConfig) {
			m.Models["small"] = 4 * gib
			m.Models["comfyui:wf"] = 8 * gib // a workflow's peak may be configured too
			m.CoResident = []string{"small"}
		})
	// The job runs until small is admitted beside it: one that ended
	// first would leave nothing to be beside.
	id := f.sendJob(t, "comfyui:wf", time.Hour)
	f.waitState(t, "the job running, measured", func(st Status) bool {
		return st.State == "image" && st.VRAM.Job != nil && st.VRAM.Job.PeakBytes == 8*gib
	})
	a := f.besideSoon(t, "small")
	f.stopJob(t, id)
	f.waitState(t, "the job over, the request on", func(st Status) bool { return st.State == "llm" && st.LLMInflight == 1 })
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.sendJob(t, "comfyui:other", 50*time.Millisecond)
	}()
	f.waitState(t, "the next job waiting for the request", func(st Status) bool { return st.ImageWaiting == 1 })
	a.Done(200, nil)
	f.g.ReleaseLLM()
	<-done
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
}

// ComfyUI's smart memory takes what is free: a workflow measured alone
// can look as large as the card, and then nothing fits beside it.
func TestCoResidentNothingBesideAWorkflowAsLargeAsTheCard(t *testing.T) {
	t.Parallel()
	card := gputest.New()
	card.ShareAmong("ollama", "comfy")
	f := newMemFixtureWith(t, card, map[string]int64{"small": 2 * gib}, comfytest.Options{JobBytes: 24 * gib},
		func(m *MemoryConfig) {
			m.Models["small"] = 2 * gib
			m.Models["comfyui:greedy"] = 24 * gib
			m.CoResident = []string{"small"}
		})
	f.sendJob(t, "comfyui:greedy", 300*time.Millisecond)
	f.waitState(t, "the job running", func(st Status) bool { return st.State == "image" && st.VRAM.Job != nil })
	if a := f.g.TryBeside("small"); a != nil {
		t.Fatal("admitted beside a workflow that takes the whole card")
	}
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
}
