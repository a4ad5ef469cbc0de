package turnstile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// runningJob posts a long prompt through Caddy and returns its prompt_id
// once ComfyUI runs it (ComfyUI drops an interrupt that comes before).
func (h *harness) runningJob(t *testing.T) string {
	t.Helper()
	id := promptID(t, h.post(context.Background(), h.image+"/prompt", promptBody(3_600_000)))
	h.waitTimeline("job "+id+" start", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "comfy", "job "+id+" start") >= 0
	})
	return id
}

// checkCancelled checks a cancel's answer, and that it came only once the
// engine had stopped the job: its end is on the timeline before the mark
// made when the answer arrived.
func (h *harness) checkCancelled(t *testing.T, r result, want, service, stopped string) {
	t.Helper()
	h.gpu.Mark("test", "cancel answered")
	if r.status != 200 || r.body != want+"\n" {
		t.Fatalf("cancel: %d %v %s, want 200 %s", r.status, r.err, r.body, want)
	}
	ev := h.gpu.Events()
	end := gputest.Index(ev, 0, service, stopped)
	if end < 0 || gputest.Index(ev, end, "test", "cancel answered") < 0 {
		t.Fatalf("the cancel answered before %q:\n%s", stopped, gputest.Dump(ev))
	}
}

// TestAdminCancelAnswersOnceTheJobHasStopped: ComfyUI stops an
// interrupted job only at its next node; the admin cancel answers after.
func TestAdminCancelAnswersOnceTheJobHasStopped(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfytest.Options{JobDuration: time.Hour, InterruptDelay: 300 * time.Millisecond}})
	id := h.runningJob(t)
	r := h.do("DELETE", h.admin+"/gpu_turnstile/job?turnstile=default", "")
	h.checkCancelled(t, r, `{"prompt_id":"`+id+`","engine":"comfyui","outcome":"interrupted"}`, "comfy", "job "+id+" end execution_interrupted")
	h.waitIdle()
	if hist := h.ts().History(time.Time{}).Jobs; len(hist) == 0 || hist[len(hist)-1].Outcome != "interrupted" {
		t.Fatalf("history jobs %+v, want the job interrupted", hist)
	}

	cases := []struct{ method, query, want string }{
		{"DELETE", "", `no image job runs: the GPU is idle`}, // turnstile defaults to "default"
		{"DELETE", "?turnstile=gpu9", `no turnstile named \"gpu9\"`},
		{"GET", "", "method GET not allowed; use DELETE"},
	}
	for _, c := range cases {
		r := h.do(c.method, h.admin+"/gpu_turnstile/job"+c.query, "")
		if want := map[string]int{"DELETE": 404, "GET": 405}[c.method]; r.status != want || !strings.Contains(r.body, c.want) {
			t.Errorf("%s %s: %d %s, want %d %s", c.method, c.query, r.status, r.body, want, c.want)
		}
	}
}

// An A1111 job is the request itself: the cancel answers once the request
// has ended, which is at the job's next step after the interrupt.
func TestCancelA1111Job(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"ollama", "a1111"}})
	resume := m.a1111.HoldJobs() // the job computes until interrupted
	defer resume()
	img := m.postAsync(context.Background(), m.sites["a1111"]+"/sdapi/v1/txt2img", txt2imgBody())
	m.waitTimeline("the job running", func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "a1111", "held after step 1") >= 0 })
	r := m.do("DELETE", m.admin+"/gpu_turnstile/job", "")
	m.checkCancelled(t, r, `{"prompt_id":null,"engine":"a1111","outcome":"interrupted"}`, "a1111", "end: interrupted")
	if r := <-img; r.status != 200 {
		t.Fatalf("txt2img: %d %s", r.status, r.body)
	}
	m.waitIdle()
}
