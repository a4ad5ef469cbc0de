package turnstile

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
)

// A job that does not stop keeps the GPU past interrupt_grace (504, shown
// in the status), until an operator hands it on with force=1: the job
// ends as abandoned.
func TestAdminForceEndsAJobThatDoesNotStop(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfytest.Options{JobDuration: time.Hour, InterruptDelay: time.Hour}, settings: "interrupt_grace 300ms\nfree_timeout 500ms"})
	h.overlapExpected = true // the abandoned job computes on: the operator's call
	id := h.runningJob(t)
	if r := h.do("DELETE", h.admin+"/gpu_turnstile/job?force=2", ""); r.status != 400 || !strings.Contains(r.body, "force=1") {
		t.Fatalf("force=2: %d %s, want 400 naming force=1", r.status, r.body)
	}
	if r := h.do("DELETE", h.admin+"/gpu_turnstile/job", ""); r.status != 504 {
		t.Fatalf("cancel of a job that does not stop: %d %s, want 504", r.status, r.body)
	}
	st := h.waitStatus("the interrupt overdue", func(st Status) bool { return st.Job != nil && st.Job.InterruptOverdue })
	if st.State != "image" || st.Job.OverdueSince == nil {
		t.Fatalf("past interrupt_grace the job must keep the GPU and show since when: %+v", st)
	}
	r := h.do("DELETE", h.admin+"/gpu_turnstile/job?force=1", "")
	if r.status != 200 || r.body != `{"prompt_id":"`+id+`","engine":"comfyui","outcome":"abandoned"}`+"\n" {
		t.Fatalf("force=1: %d %v %s, want 200 abandoned", r.status, r.err, r.body)
	}
	if hist := h.ts().gpu.History(time.Time{}).Jobs; len(hist) == 0 || hist[len(hist)-1].Outcome != "abandoned" {
		t.Fatalf("history jobs %+v, want the job abandoned", hist)
	}
	h.comfy.Restart()
}
