package turnstile

// The suite against a real ComfyUI. It runs only when COMFYUI_SRC names a
// ComfyUI checkout; see docs/development.md, "Testing against a real ComfyUI".
//
// ComfyUI runs on CPU with workflows that need no model weights
// (EmptyImage -> ImageBlur... -> PreviewImage), in front of it a Caddy with
// the plugin (in this process, as in the other integration tests) and the
// fake Ollama on the simulated GPU. Real ComfyUI does not report to the
// simulated GPU, so "the GPU is ComfyUI's" is checked against ComfyUI's own
// clock: the execution_start and execution_* timestamps of its websocket
// messages, against the fake Ollama's timeline and the turnstile's state
// transitions. A recording proxy between the turnstile and ComfyUI gives
// the moments the turnstile sent /interrupt and /free and saw the history
// entry.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// Python packages ComfyUI imports at start-up that a weight-free workflow
// never calls; the ones not installed are replaced by stand-ins
// (testdata/realcomfy/stub.py).
var realComfyStubbed = []string{
	"safetensors", "einops", "transformers", "tokenizers", "kornia",
	"spandrel", "spandrel_extra_arches", "torchsde", "pydantic_settings", "trimesh",
}

// Workflow sizes, chosen for CPU: an ImageBlur of radius 10 on a 384 px
// image takes about 1-3 s on a small machine, on 640 px about 5 s.
var (
	quickJob = blurJob{size: 384, blurs: 2, radius: 10}  // a few seconds
	longJob  = blurJob{size: 640, blurs: 30, radius: 10} // minutes unless interrupted
)

// How long a job may take to start and end on a loaded machine.
const realJobWait = 4 * time.Minute

func TestRealComfyUI(t *testing.T) {
	src := os.Getenv("COMFYUI_SRC")
	if src == "" {
		t.Skip("COMFYUI_SRC is not set: set it to a ComfyUI checkout to run the tests against a real ComfyUI")
	}
	rc := startRealComfy(t, src)
	defer rc.logFigures(t)

	t.Run("JobHoldsTheGPUUntilItEnds", rc.testJob)
	t.Run("HandOverSkipsTheFreeAndTheFreeResetsComfy", rc.testHandOver)
	t.Run("NodeErrors", rc.testNodeErrors)
	t.Run("WorkQueuedDirectly", rc.testForeign)
	t.Run("JobTimeoutInterrupts", rc.testJobTimeout)
	t.Run("ExtensionShowsTheTabsWait", rc.testExtension)
	t.Run("RestartReleases", rc.testRestart) // last: it restarts ComfyUI
}

// testJob: an image job through Caddy empties Ollama before it starts and
// keeps the GPU until ComfyUI has ended it; then ComfyUI is freed and the
// LLM request that waited goes.
func (rc *realComfy) testJob(t *testing.T) {
	h, tp := rc.harness(t, "")
	ctx := context.Background()
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	submit := time.Now()
	wf := quickJob.workflow(rc.color())
	id := promptID(t, h.post(ctx, h.image+"/prompt", rc.promptBody(wf)))
	start := rc.events().started(t, id)
	llm := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("the LLM request waiting behind the job", func(st Status) bool { return st.LLMWaiting == 1 })
	end := rc.events().ended(t, id)
	if r := <-llm; r.status != 200 {
		t.Fatalf("LLM request after the job: %d %s", r.status, r.body)
	}
	h.waitIdle()
	rc.logTimeline(t, h, tp, submit)

	if end.Type != "execution_success" {
		t.Fatalf("job ended with %s %s, want execution_success", end.Type, end.Data)
	}
	hist := rc.history(t, id)
	if hist.StatusStr != "success" || !hist.Completed || hist.Last != "execution_success" {
		t.Errorf("history entry %+v, want success, completed, last message execution_success", hist)
	}
	rc.checkOllamaEmpty(t, h, start.time(), end.time())
	rel := release(t, h, submit)
	if rel.Before(end.time()) {
		t.Errorf("GPU released at %s, before the job ended at %s", clock(rel), clock(end.time()))
	}
	free, freed := tp.find(func(c tapCall) bool { return c.is("POST", "/free") && !c.Start.Before(end.time()) })
	switch {
	case !freed || free.End.After(rel):
		t.Errorf("no /free between the job's end and the release")
	case !strings.Contains(free.Body, `"unload_models":true`) || !strings.Contains(free.Body, `"free_memory":true`):
		t.Errorf("/free body %s, want unload_models and free_memory", free.Body)
	}
	if req := ollamaRequestAfter(h, submit, "/api/chat"); req.IsZero() || req.Before(rel) || req.Before(end.time()) {
		t.Errorf("the waiting LLM request reached Ollama at %s; the job ended at %s, the GPU was released at %s",
			clock(req), clock(end.time()), clock(rel))
	}

	histSeen, _ := tp.find(func(c tapCall) bool { return c.is("GET", "/history/"+id) && c.Length > 2 })
	rc.figure(t, "job end (execution_success) -> GPU released", rel.Sub(end.time()))
	if !histSeen.End.IsZero() {
		rc.figure(t, "job end -> history entry read by the turnstile", histSeen.End.Sub(end.time()))
		rc.figure(t, "history entry read by the turnstile -> GPU released", rel.Sub(histSeen.End))
	}
	// ComfyUI's process answers nothing for a while around a job's end.
	var slowest time.Duration
	for _, c := range tp.all() {
		if c.Path != "/ws" && !c.Start.Before(end.time()) && !c.End.After(rel) {
			slowest = max(slowest, c.End.Sub(c.Start))
		}
	}
	rc.figure(t, "slowest ComfyUI answer to the turnstile between job end and release", slowest)
	if st, ok := rc.events().find(func(m comfyMsg) bool { return m.Type == "status" && m.Queue == 0 && m.At.After(end.At) }); ok {
		rc.figure(t, "job end -> status broadcast queue_remaining 0 received", st.At.Sub(end.time()))
	}
	if freed {
		rc.figure(t, "job end -> POST /free sent", free.Start.Sub(end.time()))
		rc.figure(t, "POST /free round trip", free.End.Sub(free.Start))
		rc.figure(t, "POST /free sent -> GPU released", rel.Sub(free.Start))
	}
	if ev := lastStep(h, "free"); ev != nil {
		rc.figure(t, "free step as the turnstile timed it", time.Duration(ev.Seconds*float64(time.Second)))
	}
	rc.figure(t, "job run time (execution_start -> end, ComfyUI's clock)", end.time().Sub(start.time()))
}

// testHandOver: a second identical job waiting for the GPU gets it straight
// from the first, without a free in between, so ComfyUI's cache answers it
// whole; after the free that follows, the same workflow runs again from
// scratch, which shows that /free (free_memory) reached ComfyUI's worker.
func (rc *realComfy) testHandOver(t *testing.T) {
	h, tp := rc.harness(t, "")
	ctx := context.Background()
	wf := quickJob.workflow(rc.color())
	submit := time.Now()
	idA := promptID(t, h.post(ctx, h.image+"/prompt", rc.promptBody(wf)))
	rc.events().started(t, idA)
	b := h.postAsync(ctx, h.image+"/prompt", rc.promptBody(wf))
	h.waitStatus("the second job waiting", func(st Status) bool { return st.ImageWaiting == 1 })
	endA := rc.events().ended(t, idA)
	idB := promptID(t, <-b)
	cachedB := rc.events().cached(t, idB)
	endB := rc.events().ended(t, idB)
	h.waitIdle()
	rc.logTimeline(t, h, tp, submit)
	if endA.Type != "execution_success" || endB.Type != "execution_success" {
		t.Fatalf("jobs ended %s and %s", endA.Type, endB.Type)
	}
	if len(cachedB) != len(wf) {
		t.Errorf("the identical second job had %d of %d nodes cached; want all (no free between handed-over jobs)", len(cachedB), len(wf))
	}
	frees := tp.count(func(c tapCall) bool { return c.is("POST", "/free") && c.Start.After(submit) })
	if frees != 1 {
		t.Errorf("%d frees for two consecutive jobs, want one after the second", frees)
	}
	postB, _ := tp.find(func(c tapCall) bool { return c.is("POST", "/prompt") && strings.Contains(c.Response, idB) })
	rc.figure(t, "hand-over: first job's end -> second prompt reaches ComfyUI", postB.Start.Sub(endA.time()))

	// The free reset ComfyUI's cache: the same workflow runs from scratch.
	idC := promptID(t, h.post(ctx, h.image+"/prompt", rc.promptBody(wf)))
	cachedC := rc.events().cached(t, idC)
	endC := rc.events().ended(t, idC)
	h.waitIdle()
	if len(cachedC) != 0 || endC.Type != "execution_success" {
		t.Errorf("after the free the same workflow had nodes %v cached and ended %s; want nothing cached (free_memory resets the cache)", cachedC, endC.Type)
	}
}

// testNodeErrors: a prompt that fails validation queues nothing and gives
// the GPU back at once, without a free; one that fails while running
// (an 8x8 image blurred with radius 31: valid inputs, but the padding is
// larger than the image) ends with execution_error and is freed.
func (rc *realComfy) testNodeErrors(t *testing.T) {
	h, tp := rc.harness(t, "")
	ctx := context.Background()
	begin := time.Now()

	r := h.post(ctx, h.image+"/prompt", rc.promptBody(blurJob{size: 8, blurs: 1, radius: 32}.workflow(rc.color())))
	var verr struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
		NodeErrors map[string]struct {
			Errors []struct {
				Type string `json:"type"`
			} `json:"errors"`
			ClassType string `json:"class_type"`
		} `json:"node_errors"`
	}
	if err := json.Unmarshal([]byte(r.body), &verr); r.status != 400 || err != nil ||
		verr.Error.Type != "prompt_outputs_failed_validation" || len(verr.NodeErrors["10"].Errors) == 0 ||
		verr.NodeErrors["10"].Errors[0].Type != "value_bigger_than_max" || verr.NodeErrors["10"].ClassType != "ImageBlur" {
		t.Errorf("blur_radius 32: got %d %s, want ComfyUI's 400 prompt_outputs_failed_validation, value_bigger_than_max on node 10", r.status, r.body)
	}
	h.waitIdle()
	if n := tp.count(func(c tapCall) bool { return c.is("POST", "/free") }); n != 0 {
		t.Errorf("%d frees after a prompt that queued nothing", n)
	}

	submit := time.Now()
	r = h.post(ctx, h.image+"/prompt", rc.promptBody(blurJob{size: 8, blurs: 1, radius: 31}.workflow(rc.color())))
	if r.status != 200 {
		t.Fatalf("blur_radius 31 on 8x8: %d %s; want it accepted (it fails only when it runs)", r.status, r.body)
	}
	id := promptID(t, r)
	end := rc.events().ended(t, id)
	h.waitIdle()
	rc.logTimeline(t, h, tp, begin)
	var data struct {
		ExceptionType    string `json:"exception_type"`
		ExceptionMessage string `json:"exception_message"`
		NodeType         string `json:"node_type"`
	}
	json.Unmarshal(end.Data, &data)
	t.Logf("execution error: %s on %s: %s", data.ExceptionType, data.NodeType, data.ExceptionMessage)
	if end.Type != "execution_error" || data.NodeType != "ImageBlur" {
		t.Fatalf("job ended %s %s, want execution_error on ImageBlur", end.Type, end.Data)
	}
	if hist := rc.history(t, id); hist.StatusStr != "error" || hist.Completed || hist.Last != "execution_error" {
		t.Errorf("history entry %+v, want error, not completed, last message execution_error", hist)
	}
	rel := release(t, h, submit)
	if rel.Before(end.time()) {
		t.Errorf("GPU released before the job failed")
	}
	if _, ok := tp.find(func(c tapCall) bool { return c.is("POST", "/free") && c.Start.After(submit) }); !ok {
		t.Errorf("no free after the failed job (it ran, and may have left models)")
	}
	if j := lastJob(h); j == nil || j.PromptID != id || j.Outcome != "error" {
		t.Errorf("turnstile recorded job %+v, want outcome error", j)
	}
	rc.figure(t, "execution error -> GPU released", rel.Sub(end.time()))
}

// testForeign: work queued on ComfyUI directly (its own UI), bypassing
// Caddy, is seen on the websocket and guarded: Ollama is emptied and LLM
// requests wait until it ends; and such work queued during a job of the
// turnstile's keeps the GPU until it has ended too.
func (rc *realComfy) testForeign(t *testing.T) {
	h, tp := rc.harness(t, "")
	ctx := context.Background()
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}

	// On an idle GPU.
	submit := time.Now()
	id := rc.submitDirect(t, quickJob.workflow(rc.color()))
	st := h.waitStatus("the turnstile taking the GPU for the foreign job", func(st Status) bool { return st.State == "image" })
	if st.Job == nil || st.Job.Source != "comfyui" {
		t.Errorf("status job %+v, want source comfyui", st.Job)
	}
	start := rc.events().started(t, id)
	llm := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("the LLM request waiting behind the foreign job", func(st Status) bool { return st.LLMWaiting == 1 })
	end := rc.events().ended(t, id)
	if r := <-llm; r.status != 200 {
		t.Fatalf("LLM request after the foreign job: %d %s", r.status, r.body)
	}
	h.waitIdle()
	rc.logTimeline(t, h, tp, submit)
	take := transitionAfter(h, submit, "", "image")
	rel := release(t, h, submit)
	if end.Type != "execution_success" || rel.Before(end.time()) {
		t.Errorf("foreign job ended %s at %s, GPU released at %s", end.Type, clock(end.time()), clock(rel))
	}
	if req := ollamaRequestAfter(h, submit, "/api/chat"); req.IsZero() || req.Before(end.time()) {
		t.Errorf("the LLM request reached Ollama at %s, during the foreign job (ended %s)", clock(req), clock(end.time()))
	}
	unloaded := ollamaFreeAt(h, submit)
	if unloaded.IsZero() || unloaded.After(end.time()) {
		t.Errorf("Ollama was not emptied for the foreign job")
	}
	rc.figure(t, "foreign job: POST /prompt -> turnstile holds the GPU", take.Sub(submit))
	rc.figure(t, "foreign job: execution_start -> Ollama emptied (GPU shared)", unloaded.Sub(start.time()))
	rc.figure(t, "foreign job: end -> GPU released", rel.Sub(end.time()))

	// Queued directly while a job of the turnstile's runs.
	submit = time.Now()
	idA := promptID(t, h.post(ctx, h.image+"/prompt", rc.promptBody(quickJob.workflow(rc.color()))))
	rc.events().started(t, idA)
	idB := rc.submitDirect(t, quickJob.workflow(rc.color()))
	llm = h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	endA := rc.events().ended(t, idA)
	endB := rc.events().ended(t, idB)
	if r := <-llm; r.status != 200 {
		t.Fatalf("LLM request: %d %s", r.status, r.body)
	}
	h.waitIdle()
	rc.logTimeline(t, h, tp, submit)
	rel = release(t, h, submit)
	if rel.Before(endB.time()) {
		t.Errorf("GPU released at %s, before the job queued directly behind ours ended at %s (ours ended %s)",
			clock(rel), clock(endB.time()), clock(endA.time()))
	}
	if req := ollamaRequestAfter(h, submit, "/api/chat"); req.IsZero() || req.Before(endB.time()) {
		t.Errorf("the LLM request reached Ollama at %s, before the queue drained at %s", clock(req), clock(endB.time()))
	}
	rc.figure(t, "job queued directly behind ours: its end -> GPU released", rel.Sub(endB.time()))
}

// testJobTimeout: past job_timeout the job is interrupted. ComfyUI stops it
// only at its next node, seconds later; until then the GPU is ComfyUI's.
func (rc *realComfy) testJobTimeout(t *testing.T) {
	h, tp := rc.harness(t, "job_timeout 2s")
	ctx := context.Background()
	submit := time.Now()
	id := promptID(t, h.post(ctx, h.image+"/prompt", rc.promptBody(longJob.workflow(rc.color()))))
	rc.events().started(t, id)
	llm := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("the LLM request waiting behind the job", func(st Status) bool { return st.LLMWaiting == 1 })
	intr := tp.wait(t, "the turnstile's /interrupt", time.Minute, func(c tapCall) bool { return c.is("POST", "/interrupt") })
	end := rc.events().ended(t, id)
	if r := <-llm; r.status != 200 {
		t.Fatalf("LLM request after the job: %d %s", r.status, r.body)
	}
	h.waitIdle()
	rc.logTimeline(t, h, tp, submit)
	if end.Type != "execution_interrupted" {
		t.Fatalf("job ended %s, want execution_interrupted", end.Type)
	}
	if !strings.Contains(intr.Body, id) {
		t.Errorf("/interrupt body %s, want the job's prompt_id", intr.Body)
	}
	rel := release(t, h, submit)
	stop := end.time()
	rc.figure(t, "POST /interrupt -> ComfyUI stopped the job (execution_interrupted)", stop.Sub(intr.Start))
	rc.figure(t, "POST /interrupt -> GPU released", rel.Sub(intr.Start))
	rc.figure(t, "job really stopped -> GPU released (negative: shared)", rel.Sub(stop))
	if rel.Before(stop) {
		t.Errorf("GPU released at %s, %v after the interrupt, but ComfyUI stopped the job only at %s, %v after it: the GPU was shared for %v",
			clock(rel), rel.Sub(intr.Start).Round(time.Millisecond), clock(stop), stop.Sub(intr.Start).Round(time.Millisecond),
			stop.Sub(rel).Round(time.Millisecond))
	}
	if req := ollamaRequestAfter(h, submit, "/api/chat"); req.IsZero() || req.Before(stop) {
		t.Errorf("the LLM request reached Ollama at %s, while the interrupted job still ran (it stopped at %s)", clock(req), clock(stop))
	}
	if j := lastJob(h); j == nil || j.PromptID != id {
		t.Errorf("turnstile recorded job %+v", j)
	} else {
		t.Logf("turnstile recorded the job's outcome as %q", j.Outcome)
	}
}

// testRestart: ComfyUI dies during a job and comes back. Its process and
// its memory are gone, and the job with it: the GPU is released at once,
// not at job_timeout, and the turnstile works with the new process.
func (rc *realComfy) testRestart(t *testing.T) {
	rc.ensureIdle(t)
	// No recording proxy here: the turnstile must see ComfyUI refuse
	// connections, as it would.
	h := newHarness(t, harnessOptions{comfyURL: rc.URL})
	h.waitStatus("websocket up", func(st Status) bool { return wsUp(st) })
	h.waitIdle()
	ctx := context.Background()
	submit := time.Now()
	id := promptID(t, h.post(ctx, h.image+"/prompt", rc.promptBody(longJob.workflow(rc.color()))))
	rc.events().started(t, id)
	llm := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("the LLM request waiting behind the job", func(st Status) bool { return st.LLMWaiting == 1 })
	killed, gone := rc.kill(t)
	if r := <-llm; r.status != 200 {
		t.Fatalf("LLM request after ComfyUI died: %d %s", r.status, r.body)
	}
	h.waitIdle()
	rc.logTimeline(t, h, nil, submit)
	rel := release(t, h, submit)
	if j := lastJob(h); j == nil || j.PromptID != id || j.Outcome != "lost" {
		t.Errorf("turnstile recorded job %+v, want outcome lost", j)
	}
	rc.figure(t, "ComfyUI killed mid-job: SIGKILL sent -> process gone", gone.Sub(killed))
	rc.figure(t, "ComfyUI killed mid-job: SIGKILL sent -> GPU released", rel.Sub(killed))

	began := time.Now()
	rc.start(t)
	rc.figure(t, "ComfyUI restart: process start -> listening", time.Since(began))
	h.waitStatus("websocket back", func(st Status) bool { return wsUp(st) })
	var q struct {
		Running []json.RawMessage `json:"queue_running"`
		Pending []json.RawMessage `json:"queue_pending"`
	}
	if err := rc.getJSON("/queue", &q); err != nil || len(q.Running)+len(q.Pending) != 0 {
		t.Errorf("queue after the restart: %+v %v, want empty", q, err)
	}
	if hist := rc.rawHistory(t, id); hist != "{}" {
		t.Errorf("history of the job after the restart: %s, want {} (lost)", hist)
	}
	submit = time.Now()
	id = promptID(t, h.post(ctx, h.image+"/prompt", rc.promptBody(quickJob.workflow(rc.color()))))
	end := rc.events().ended(t, id)
	h.waitIdle()
	rc.logTimeline(t, h, nil, submit)
	if rel := release(t, h, submit); end.Type != "execution_success" || rel.Before(end.time()) {
		t.Errorf("job after the restart ended %s at %s, GPU released %s", end.Type, clock(end.time()), clock(rel))
	}
}

// ---- ComfyUI, the process

type realComfy struct {
	src, python, dir string
	port             int
	URL              string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	log     *procLog
	ev      *comfyEvents
	colors  atomic.Int64
	figures []string
}

// startRealComfy prepares the stand-ins and directories and starts ComfyUI
// for the whole suite.
func startRealComfy(t *testing.T, src string) *realComfy {
	t.Helper()
	if _, err := os.Stat(filepath.Join(src, "main.py")); err != nil {
		t.Fatalf("COMFYUI_SRC=%s is not a ComfyUI checkout: %v", src, err)
	}
	rc := &realComfy{src: src, python: os.Getenv("COMFYUI_PYTHON"), dir: t.TempDir(), port: freePort(t)}
	if rc.python == "" {
		rc.python = "/usr/bin/python3"
	}
	rc.URL = fmt.Sprintf("http://127.0.0.1:%d", rc.port)
	rc.colors.Store(time.Now().UnixNano() % 0xFFFFFF)
	rc.writeStubs(t)
	for _, d := range []string{"front", "base"} {
		if err := os.MkdirAll(filepath.Join(rc.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rc.dir, "front", "index.html"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rc.installExtension(t)
	if v, err := os.ReadFile(filepath.Join(src, "comfyui_version.py")); err == nil {
		t.Logf("ComfyUI at %s: %s", src, strings.TrimSpace(lastLine(string(v))))
	}
	t.Cleanup(func() {
		rc.stop()
		if t.Failed() {
			t.Logf("ComfyUI's log (last lines):\n%s", rc.log.tail(40))
		}
	})
	began := time.Now()
	rc.start(t)
	rc.figure(t, "ComfyUI start: process start -> listening", time.Since(began))
	return rc
}

// writeStubs writes a stand-in package for each of realComfyStubbed that
// the Python in use does not have.
func (rc *realComfy) writeStubs(t *testing.T) {
	t.Helper()
	stub, err := os.ReadFile(filepath.Join("testdata", "realcomfy", "stub.py"))
	if err != nil {
		t.Fatal(err)
	}
	const probe = "import importlib.util, sys\nfor n in sys.argv[1:]:\n    if importlib.util.find_spec(n) is None: print(n)\n"
	out, err := exec.Command(rc.python, append([]string{"-c", probe}, realComfyStubbed...)...).Output()
	if err != nil {
		t.Fatalf("%s: %v (set COMFYUI_PYTHON to the Python that has ComfyUI's dependencies)", rc.python, err)
	}
	missing := strings.Fields(string(out))
	for _, name := range missing {
		dir := filepath.Join(rc.dir, "py", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "__init__.py"), stub, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if len(missing) > 0 {
		t.Logf("stand-ins for %s", strings.Join(missing, ", "))
	}
}

// start runs ComfyUI on rc.port and returns once it listens, with the
// test's own websocket connected.
func (rc *realComfy) start(t *testing.T) {
	t.Helper()
	pythonPath := filepath.Join(rc.dir, "py")
	if old := os.Getenv("PYTHONPATH"); old != "" {
		pythonPath += string(os.PathListSeparator) + old
	}
	cmd := exec.Command(rc.python, "main.py", "--cpu", "--listen", "127.0.0.1", "--port", fmt.Sprint(rc.port),
		"--disable-all-custom-nodes", "--whitelist-custom-nodes", extensionNode, "--disable-api-nodes",
		"--base-directory", filepath.Join(rc.dir, "base"), "--database-url", "sqlite:///:memory:",
		"--front-end-root", filepath.Join(rc.dir, "front"))
	cmd.Dir = rc.src
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonPath, "PYTHONUNBUFFERED=1")
	log := newProcLog()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting ComfyUI: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	rc.mu.Lock()
	rc.cmd, rc.exited, rc.log = cmd, exited, log
	old := rc.ev
	rc.mu.Unlock()
	if old != nil {
		old.close() // the socket to the previous process
	}
	// ComfyUI logs this line once its listener is up.
	if !log.waitFor("To see the GUI go to:", 3*time.Minute, exited) {
		t.Fatalf("ComfyUI did not start listening:\n%s", log.tail(40))
	}
	ev := dialComfyEvents(t, rc.URL, "turnstile-test-"+fmt.Sprint(time.Now().UnixNano()))
	rc.mu.Lock()
	rc.ev = ev
	rc.mu.Unlock()
}

// kill ends ComfyUI at once (SIGKILL) and returns, once it has exited,
// when the signal was sent and when the process was gone.
func (rc *realComfy) kill(t *testing.T) (sent, gone time.Time) {
	t.Helper()
	rc.mu.Lock()
	cmd, exited := rc.cmd, rc.exited
	rc.mu.Unlock()
	sent = time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	return sent, time.Now()
}

func (rc *realComfy) stop() {
	rc.mu.Lock()
	cmd, exited, ev := rc.cmd, rc.exited, rc.ev
	rc.mu.Unlock()
	if ev != nil {
		ev.close()
	}
	if cmd != nil {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	}
}

func (rc *realComfy) events() *comfyEvents {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.ev
}

// harness starts a Caddy with the plugin in front of ComfyUI, through a
// recording proxy, once ComfyUI's queue is empty.
func (rc *realComfy) harness(t *testing.T, settings string) (*harness, *tap) {
	t.Helper()
	rc.ensureIdle(t)
	tp := newTap(t, rc.URL)
	h := newHarness(t, harnessOptions{comfyURL: tp.URL, settings: settings})
	h.waitStatus("websocket up", func(st Status) bool { return wsUp(st) })
	h.waitIdle()
	return h, tp
}

func wsUp(st Status) bool {
	ws := st.Upstreams["comfy"].Websocket
	return ws != nil && *ws
}

// ensureIdle empties ComfyUI's queue (a job an earlier test left running
// is interrupted) and waits until nothing runs.
func (rc *realComfy) ensureIdle(t *testing.T) {
	t.Helper()
	ev := rc.events()
	deadline := time.Now().Add(realJobWait)
	asked := false
	for {
		changed := ev.changed()
		var q struct {
			Running []json.RawMessage `json:"queue_running"`
			Pending []json.RawMessage `json:"queue_pending"`
		}
		if err := rc.getJSON("/queue", &q); err != nil {
			t.Fatal(err)
		}
		if len(q.Running)+len(q.Pending) == 0 {
			return
		}
		if !asked {
			t.Logf("ComfyUI still has %d running, %d pending: clearing it", len(q.Running), len(q.Pending))
			rc.postJSON(t, "/queue", `{"clear":true}`)
			rc.postJSON(t, "/interrupt", `{}`)
			asked = true
		}
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
			t.Fatal("ComfyUI's queue did not empty")
		}
	}
}

// color returns a colour no earlier workflow of this run used.
func (rc *realComfy) color() int { return int(rc.colors.Add(7919) % 0x1000000) }

// promptBody is a /prompt body as ComfyUI's frontend sends it, with the
// test's websocket as the client, so that socket gets the job's messages.
func (rc *realComfy) promptBody(wf map[string]any) string {
	b, _ := json.Marshal(map[string]any{"prompt": wf, "client_id": rc.events().id})
	return string(b)
}

// submitDirect queues a workflow on ComfyUI itself, bypassing Caddy.
func (rc *realComfy) submitDirect(t *testing.T, wf map[string]any) string {
	t.Helper()
	resp, err := http.Post(rc.URL+"/prompt", "application/json", strings.NewReader(rc.promptBody(wf)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return promptID(t, result{status: resp.StatusCode, body: string(b)})
}

func (rc *realComfy) postJSON(t *testing.T, path, body string) {
	t.Helper()
	resp, err := http.Post(rc.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func (rc *realComfy) getJSON(path string, out any) error {
	resp, err := http.Get(rc.URL + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

func (rc *realComfy) rawHistory(t *testing.T, id string) string {
	t.Helper()
	resp, err := http.Get(rc.URL + "/history/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(b))
}

type historyStatus struct {
	StatusStr string
	Completed bool
	Last      string // the last message's type
}

func (rc *realComfy) history(t *testing.T, id string) historyStatus {
	t.Helper()
	var out map[string]struct {
		Status struct {
			StatusStr string              `json:"status_str"`
			Completed bool                `json:"completed"`
			Messages  [][]json.RawMessage `json:"messages"`
		} `json:"status"`
	}
	if err := rc.getJSON("/history/"+id, &out); err != nil {
		t.Fatal(err)
	}
	e, ok := out[id]
	if !ok {
		t.Fatalf("no history entry for %s", id)
	}
	st := historyStatus{StatusStr: e.Status.StatusStr, Completed: e.Status.Completed}
	if n := len(e.Status.Messages); n > 0 && len(e.Status.Messages[n-1]) > 0 {
		json.Unmarshal(e.Status.Messages[n-1][0], &st.Last)
	}
	return st
}

// figure logs a measurement and keeps it for the summary.
func (rc *realComfy) figure(t *testing.T, what string, d time.Duration) {
	t.Helper()
	line := fmt.Sprintf("%-66s %9.1f ms", what, float64(d.Microseconds())/1000)
	t.Logf("measured: %s", line)
	rc.mu.Lock()
	rc.figures = append(rc.figures, fmt.Sprintf("%-44s %s", t.Name(), line))
	rc.mu.Unlock()
}

func (rc *realComfy) logFigures(t *testing.T) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	t.Logf("measurements:\n%s", strings.Join(rc.figures, "\n"))
}

// checkOllamaEmpty reports Ollama holding a model at any moment of
// ComfyUI's job, [start, end] on ComfyUI's clock.
func (rc *realComfy) checkOllamaEmpty(t *testing.T, h *harness, start, end time.Time) {
	t.Helper()
	loaded := false
	for _, e := range h.gpu.Events() {
		if e.Service != "ollama" {
			continue
		}
		if e.At.Before(start) {
			loaded = e.Users > 0
			continue
		}
		if e.At.After(end) {
			break
		}
		if e.Users > 0 {
			t.Errorf("Ollama used the GPU during the job (%s at %s)", e.What, clock(e.At))
			return
		}
	}
	if loaded {
		t.Errorf("Ollama held a model when the job started at %s", clock(start))
	}
}

// ---- the turnstile's record

// release returns when the turnstile gave the GPU up after an exclusive
// use that began after since.
func release(t *testing.T, h *harness, since time.Time) time.Time {
	t.Helper()
	at := transitionAfter(h, since, "image", "")
	if at.IsZero() {
		t.Fatalf("no release of the GPU after %s", clock(since))
	}
	return at
}

// transitionAfter returns the first transition after since that matches
// from and to (empty matches any).
func transitionAfter(h *harness, since time.Time, from, to string) time.Time {
	for _, tr := range h.ts().gpu.History(since).Transitions {
		if (from == "" || tr.From == from) && (to == "" || tr.To == to) {
			return tr.At
		}
	}
	return time.Time{}
}

func lastJob(h *harness) *gpu.JobEntry {
	jobs := h.ts().gpu.History(time.Time{}).Jobs
	if len(jobs) == 0 {
		return nil
	}
	return &jobs[len(jobs)-1]
}

func lastStep(h *harness, kind string) *gpu.EventEntry {
	events := h.ts().gpu.History(time.Time{}).Events
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Kind == kind {
			return &events[i]
		}
	}
	return nil
}

// ollamaRequestAfter returns when the fake Ollama got the first request on
// path after since.
func ollamaRequestAfter(h *harness, since time.Time, path string) time.Time {
	for _, e := range h.gpu.Events() {
		if e.Service == "ollama" && e.At.After(since) && strings.HasPrefix(e.What, "request "+path+" ") {
			return e.At
		}
	}
	return time.Time{}
}

// ollamaFreeAt returns the first moment after since at which the fake
// Ollama held nothing.
func ollamaFreeAt(h *harness, since time.Time) time.Time {
	for _, e := range h.gpu.Events() {
		if e.Service == "ollama" && e.At.After(since) && e.Users == 0 && strings.HasPrefix(e.What, "unload") {
			return e.At
		}
	}
	return time.Time{}
}

// logTimeline logs what the fake Ollama, the turnstile, the recording
// proxy and ComfyUI's messages show since a moment, merged in time order
// (shown with -v or on failure).
func (rc *realComfy) logTimeline(t *testing.T, h *harness, tp *tap, since time.Time) {
	t.Helper()
	type entry struct {
		at        time.Time
		who, what string
	}
	var es []entry
	for _, e := range h.gpu.Events() {
		if e.At.After(since) {
			es = append(es, entry{e.At, "ollama", fmt.Sprintf("%s (%d)", e.What, e.Users)})
		}
	}
	v := h.ts().gpu.History(since)
	for _, tr := range v.Transitions {
		es = append(es, entry{tr.At, "lock", tr.From + " -> " + tr.To})
	}
	for _, e := range v.Events {
		d := time.Duration(e.Seconds * float64(time.Second))
		es = append(es, entry{e.At.Add(-d), "step", fmt.Sprintf("%s started (took %v) %s", e.Kind, d.Round(time.Microsecond), e.Detail)})
	}
	if tp != nil {
		for _, c := range tp.all() {
			switch {
			case !c.Start.After(since):
			case c.Method == "POST":
				es = append(es, entry{c.Start, "->comfy", fmt.Sprintf("POST %s %s -> %d in %v", c.Path, c.Body, c.Status, c.End.Sub(c.Start).Round(time.Microsecond))})
			case strings.HasPrefix(c.Path, "/history/") && c.Length > 2:
				es = append(es, entry{c.End, "->comfy", "GET " + c.Path + " found"})
			case c.End.Sub(c.Start) > 20*time.Millisecond && c.Path != "/ws":
				es = append(es, entry{c.Start, "->comfy", fmt.Sprintf("%s %s answered only after %v", c.Method, c.Path, c.End.Sub(c.Start).Round(time.Millisecond))})
			}
		}
	}
	for _, m := range rc.events().all() {
		switch {
		case !m.At.After(since):
		case m.Type == "status":
			es = append(es, entry{m.At, "comfy", fmt.Sprintf("status queue_remaining %d (received)", m.Queue)})
		case m.Type == "execution_start" || m.isEnd():
			es = append(es, entry{m.time(), "comfy", m.Type + " " + m.PromptID})
		}
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].at.Before(es[j].at) })
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "\n  %s %+8.3fs %-8s %s", clock(e.at), e.at.Sub(since).Seconds(), e.who, e.what)
	}
	t.Logf("timeline:%s", b.String())
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.Format("15:04:05.000")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// ---- workflows

// blurJob is EmptyImage -> blurs x ImageBlur -> PreviewImage: it runs in
// ComfyUI itself and needs no model weights.
type blurJob struct{ size, blurs, radius int }

// workflow returns the graph in ComfyUI's API format. The colour makes
// each one distinct, so ComfyUI's cache does not answer it.
func (j blurJob) workflow(color int) map[string]any {
	wf := map[string]any{"1": map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{
		"width": j.size, "height": j.size, "batch_size": 1, "color": color}}}
	prev := "1"
	for i := range j.blurs {
		id := fmt.Sprint(10 + i)
		wf[id] = map[string]any{"class_type": "ImageBlur", "inputs": map[string]any{
			"image": []any{prev, 0}, "blur_radius": j.radius, "sigma": 5.0}}
		prev = id
	}
	wf["99"] = map[string]any{"class_type": "PreviewImage", "inputs": map[string]any{"images": []any{prev, 0}}}
	return wf
}

// ---- ComfyUI's websocket, as the test's own client

type comfyMsg struct {
	At       time.Time // received
	Type     string
	PromptID string
	TS       int64  // ComfyUI's timestamp (Unix ms), when it has one
	Queue    int    // queue_remaining of a status message
	Node     string // node of an executing message
	Data     json.RawMessage
}

// time is when ComfyUI says it happened (its clock is this machine's).
func (m comfyMsg) time() time.Time {
	if m.TS == 0 {
		return m.At
	}
	return time.UnixMilli(m.TS)
}

func (m comfyMsg) isEnd() bool {
	return m.Type == "execution_success" || m.Type == "execution_error" || m.Type == "execution_interrupted"
}

// recording is what a test has seen so far, in order, with a signal at
// each new item.
type recording[T any] struct {
	mu    sync.Mutex
	items []T
	ch    chan struct{}
}

func (r *recording[T]) add(v T) {
	r.mu.Lock()
	r.items = append(r.items, v)
	r.mu.Unlock()
	r.signal()
}

func (r *recording[T]) signal() {
	r.mu.Lock()
	if r.ch != nil {
		close(r.ch)
	}
	r.ch = make(chan struct{})
	r.mu.Unlock()
}

func (r *recording[T]) changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch == nil {
		r.ch = make(chan struct{})
	}
	return r.ch
}

func (r *recording[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.items)
}

func (r *recording[T]) find(match func(T) bool) (T, bool) {
	for _, v := range r.all() {
		if match(v) {
			return v, true
		}
	}
	var zero T
	return zero, false
}

func (r *recording[T]) count(match func(T) bool) int {
	n := 0
	for _, v := range r.all() {
		if match(v) {
			n++
		}
	}
	return n
}

// wait returns the first item that matches, waiting for it until timeout,
// or until closed (which may be nil) is closed.
func (r *recording[T]) wait(t *testing.T, what string, timeout time.Duration, closed <-chan struct{}, match func(T) bool) T {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		ch := r.changed()
		if v, ok := r.find(match); ok {
			return v
		}
		select {
		case <-ch:
		case <-closed:
			if v, ok := r.find(match); ok {
				return v
			}
			t.Fatalf("the stream closed while waiting for %s", what)
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

type comfyEvents struct {
	recording[comfyMsg]
	id   string
	conn *websocket.Conn
	done chan struct{}
}

func dialComfyEvents(t *testing.T, base, id string) *comfyEvents {
	t.Helper()
	u, _ := url.Parse(base + "/ws")
	u.Scheme = "ws"
	u.RawQuery = url.Values{"clientId": {id}}.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, u.String(), nil)
	if err != nil {
		t.Fatalf("ComfyUI websocket: %v", err)
	}
	conn.SetReadLimit(64 << 20)
	e := &comfyEvents{id: id, conn: conn, done: make(chan struct{})}
	go e.read()
	e.wait(t, "the websocket's first status", 30*time.Second, func(m comfyMsg) bool { return m.Type == "status" })
	return e
}

func (e *comfyEvents) read() {
	defer close(e.done)
	for {
		typ, data, err := e.conn.Read(context.Background())
		if err != nil {
			e.signal()
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		var raw struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		if json.Unmarshal(data, &raw) != nil {
			continue
		}
		var d struct {
			PromptID  string `json:"prompt_id"`
			Timestamp int64  `json:"timestamp"`
			Node      any    `json:"node"`
			Status    struct {
				ExecInfo struct {
					QueueRemaining int `json:"queue_remaining"`
				} `json:"exec_info"`
			} `json:"status"`
		}
		json.Unmarshal(raw.Data, &d)
		m := comfyMsg{At: time.Now(), Type: raw.Type, PromptID: d.PromptID, TS: d.Timestamp, Queue: d.Status.ExecInfo.QueueRemaining, Data: raw.Data}
		if s, ok := d.Node.(string); ok {
			m.Node = s
		}
		e.add(m)
	}
}

func (e *comfyEvents) close() {
	e.conn.CloseNow()
	<-e.done
}

// wait returns the first message that matches, waiting for it.
func (e *comfyEvents) wait(t *testing.T, what string, timeout time.Duration, match func(comfyMsg) bool) comfyMsg {
	t.Helper()
	return e.recording.wait(t, what, timeout, e.done, match)
}

func (e *comfyEvents) started(t *testing.T, id string) comfyMsg {
	t.Helper()
	return e.wait(t, "execution_start of "+id, realJobWait, func(m comfyMsg) bool { return m.Type == "execution_start" && m.PromptID == id })
}

func (e *comfyEvents) ended(t *testing.T, id string) comfyMsg {
	t.Helper()
	return e.wait(t, "the end of "+id, realJobWait, func(m comfyMsg) bool { return m.isEnd() && m.PromptID == id })
}

// cached returns the nodes ComfyUI's cache answered for a job.
func (e *comfyEvents) cached(t *testing.T, id string) []string {
	t.Helper()
	m := e.wait(t, "execution_cached of "+id, realJobWait, func(m comfyMsg) bool { return m.Type == "execution_cached" && m.PromptID == id })
	var d struct {
		Nodes []string `json:"nodes"`
	}
	json.Unmarshal(m.Data, &d)
	return d.Nodes
}

// ---- the recording proxy between the turnstile and ComfyUI

type tapCall struct {
	Start, End   time.Time
	Method, Path string
	Body         string // the request body's start
	Status       int
	Length       int64  // the response's Content-Length
	Response     string // the start of a /prompt response
}

func (c tapCall) is(method, path string) bool {
	return c.Method == method && (c.Path == path || c.Path == "/api"+path)
}

type tap struct {
	*httptest.Server
	recording[tapCall]
}

type tapKey struct{}

func newTap(t *testing.T, target string) *tap {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &tap{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(resp *http.Response) error {
		c := resp.Request.Context().Value(tapKey{}).(*tapCall)
		c.Status, c.Length = resp.StatusCode, resp.ContentLength
		if strings.HasSuffix(c.Path, "/prompt") && resp.ContentLength >= 0 && resp.ContentLength < 1<<16 {
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b))
			c.Response = string(b)
			return err
		}
		return nil
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &tapCall{Start: time.Now(), Method: r.Method, Path: r.URL.Path}
		if r.Method == http.MethodPost && r.Body != nil {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			c.Body = string(b[:min(len(b), 300)])
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tapKey{}, c)))
		c.End = time.Now()
		p.add(*c)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *tap) wait(t *testing.T, what string, timeout time.Duration, match func(tapCall) bool) tapCall {
	t.Helper()
	return p.recording.wait(t, what, timeout, nil, match)
}

// ---- a process's output, line by line

type procLog struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	ch      chan struct{}
}

func newProcLog() *procLog { return &procLog{ch: make(chan struct{})} }

func (l *procLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	close(l.ch)
	l.ch = make(chan struct{})
	return len(p), nil
}

// waitFor waits for a line containing s; false if the process exits or
// the timeout passes first.
func (l *procLog) waitFor(s string, timeout time.Duration, exited <-chan struct{}) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		ch := l.ch
		found := slices.ContainsFunc(l.lines, func(line string) bool { return strings.Contains(line, s) })
		l.mu.Unlock()
		if found {
			return true
		}
		select {
		case <-ch:
		case <-exited:
			return false
		case <-deadline.C:
			return false
		}
	}
}

// tail returns the last n lines that are not the same warning repeated.
func (l *procLog) tail(n int) string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	var out []string
	for i := len(l.lines) - 1; i >= 0 && len(out) < n; i-- {
		if !seen[l.lines[i]] {
			seen[l.lines[i]] = true
			out = append(out, l.lines[i])
		}
	}
	slices.Reverse(out)
	return strings.Join(out, "\n")
}
