package turnstile

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// TestOpenWebUIFilter runs the Python tests of the Open WebUI filter
// (examples/open-webui) against Caddy with the fakes: the filter follows
// the status's event stream while its chat waits behind an image job,
// which the Python tests start and end through a control server here.
func TestOpenWebUIFilter(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	h := newHarness(t, harnessOptions{})
	h.waitIdle()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	control := httptest.NewServer(jobControl(ctx, h))
	defer control.Close()

	cmd := exec.CommandContext(ctx, python, "-m", "unittest", "-v", "test_gpu_turnstile_status")
	cmd.Dir = "examples/open-webui"
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1",
		"TURNSTILE_LLM_URL="+h.llm, "TURNSTILE_STATUS_URL="+h.llm+"/healthz", "TURNSTILE_CONTROL_URL="+control.URL)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "skipped 'run by the Go test") {
		t.Fatalf("python tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// jobControl lets the Python tests start an image job through Caddy
// (POST /job, answered once the job runs) and end it (POST /end, an
// interrupt to the fake ComfyUI once its job has started).
func jobControl(ctx context.Context, h *harness) http.Handler {
	running := func(ev []gputest.Event) bool {
		last := -1
		for i, e := range ev {
			if e.Service == "comfy" && strings.HasPrefix(e.What, "job ") && strings.HasSuffix(e.What, " start") {
				last = i
			}
		}
		return last >= 0 && gputest.Index(ev, last, "comfy", " end ") < 0
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /job", func(w http.ResponseWriter, r *http.Request) {
		answer := h.postAsync(ctx, h.image+"/prompt", promptBody(int(time.Hour/time.Millisecond)))
		if !h.gpu.WaitFor(15*time.Second, running) {
			http.Error(w, "the job did not start", http.StatusInternalServerError)
			return
		}
		if a := <-answer; a.status != http.StatusOK {
			http.Error(w, "prompt: "+a.body, http.StatusInternalServerError)
		}
	})
	mux.HandleFunc("POST /end", func(w http.ResponseWriter, r *http.Request) {
		if !h.gpu.WaitFor(15*time.Second, running) {
			http.Error(w, "no job runs", http.StatusInternalServerError)
			return
		}
		resp, err := http.Post(h.comfy.URL+"/interrupt", "application/json", strings.NewReader("{}"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp.Body.Close()
	})
	return mux
}
