package gpu

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/comfyui"
	ollamaengine "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// recorder is a Metrics that remembers what it was told.
type recorder struct {
	coResident []string
	mu         sync.Mutex
	steps      []string
	jobs       []string
	holds      []string
	overdue    []string
	errors     []string
	waits      []lock.State
}

func (r *recorder) Waited(kind lock.State, _ time.Duration) { r.add(&r.waits, kind) }
func (r *recorder) Step(step, _ string, _ time.Duration)    { r.add(&r.steps, step) }
func (r *recorder) UpstreamError(up, _, op string)          { r.add(&r.errors, up+" "+op) }
func (r *recorder) JobEnded(outcome string, _ time.Duration) {
	r.add(&r.jobs, outcome)
}
func (r *recorder) HoldEvent(event string)         { r.add(&r.holds, event) }
func (r *recorder) InterruptOverdue(engine string) { r.add(&r.overdue, engine) }
func (r *recorder) CoResident()                    { r.add(&r.coResident, "") }

func (r *recorder) add(to any, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch to := to.(type) {
	case *[]string:
		*to = append(*to, v.(string))
	case *[]lock.State:
		*to = append(*to, v.(lock.State))
	}
}

func (r *recorder) get(from *[]string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), *from...)
}

// fixture is a GPU orchestrated over the fake Ollama and ComfyUI, without
// Caddy.
type fixture struct {
	g      *GPU
	m      *recorder
	card   *gputest.GPU
	ollama *ollamatest.Server
	comfy  *comfytest.Server
	cfg    *Config
	// bypassed is set by a test whose work bypasses the turnstile on
	// purpose: the GPU is shared until the turnstile sees it.
	bypassed bool
	clients  struct {
		ollama *ollama.Client
		comfy  *comfy.Client
	}
}

func newFixture(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	return newFixtureWith(t, comfytest.Options{JobDuration: 50 * time.Millisecond, HistoryLag: 5 * time.Millisecond}, edit)
}

// newFixtureWith is newFixture with the fake ComfyUI shaped by opts.
func newFixtureWith(t *testing.T, opts comfytest.Options, edit func(*Config)) *fixture {
	t.Helper()
	return newFixtureOn(t, gputest.New(), ollamatest.Options{}, opts, edit)
}

// newFixtureOn is newFixture on card, with the fakes shaped by their
// options.
func newFixtureOn(t *testing.T, card *gputest.GPU, oopts ollamatest.Options, opts comfytest.Options, edit func(*Config)) *fixture {
	t.Helper()
	f := &fixture{m: &recorder{}, card: card}
	f.ollama = ollamatest.NewServer(f.card, oopts)
	f.comfy = comfytest.NewServer(f.card, opts)
	oc, err := ollama.NewClient(f.ollama.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := comfy.NewClient(f.comfy.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.clients.ollama, f.clients.comfy = oc, cc
	f.cfg = testConfig()
	f.cfg.LLMs = []LLMEngine{ollamaengine.New("ollama", oc, 20*time.Millisecond)}
	f.cfg.Images = []ImageEngine{comfyui.New("comfyui", cc, testComfyOptions)}
	if edit != nil {
		edit(f.cfg)
	}
	f.g = New("test", f.m)
	t.Cleanup(func() {
		f.g.Close()
		f.comfy.Close()
		f.ollama.Close()
		if o := f.card.Overlaps(); len(o) > 0 && !f.bypassed {
			t.Errorf("GPU shared: %v\n%s", o, gputest.Dump(f.card.Events()))
		}
	})
	f.g.Apply(f.cfg, zap.NewNop())
	f.waitState(t, "idle after the start-up probe", func(st Status) bool { return st.State == "idle" })
	return f
}

var testComfyOptions = comfyui.Options{HistoryPoll: 20 * time.Millisecond, FreePoll: 20 * time.Millisecond,
	BackoffInitial: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond}

// testConfig is a Config with short timeouts and no engines.
func testConfig() *Config {
	return &Config{
		UnloadTimeout: 5 * time.Second, JobTimeout: 10 * time.Second, FreeTimeout: 5 * time.Second,
		InterruptGrace: 5 * time.Second, WarmTimeout: 5 * time.Second, UnloadPoll: 20 * time.Millisecond,
		ProbeTimeout: 2 * time.Second, BackoffInitial: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
	}
}

// waitState polls the status until cond holds.
func (f *fixture) waitState(t *testing.T, what string, cond func(Status) bool) Status {
	t.Helper()
	return waitStatus(t, f.g, what, cond)
}

// waitStatus waits, on the GPU's change signal, until its status meets
// cond, for 10 s at most.
func waitStatus(t testing.TB, g *GPU, what string, cond func(Status) bool) Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := g.WaitStatus(ctx, cond)
	if err != nil {
		t.Fatalf("%s: not reached; status %+v", what, st)
	}
	return st
}

// loadModel has the fake Ollama load a model, as a chat would.
func (f *fixture) loadModel(t *testing.T, model string) {
	t.Helper()
	if err := f.clients.ollama.Warm(context.Background(), model, ""); err != nil {
		t.Fatal(err)
	}
}

func TestImageJobEmptiesOllamaAndFreesAfter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.loadModel(t, "llama3.2")
	job, err := f.g.BeginImage(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Prepare(); err != nil {
		t.Fatal(err)
	}
	if loaded := f.ollama.Loaded(); len(loaded) != 0 {
		t.Fatalf("Ollama still has %v loaded during the job", loaded)
	}
	job.Submitting()
	id := f.comfy.Submit(50 * time.Millisecond)
	job.Submitted(id)
	st := f.g.Status()
	if st.State != "image" || st.Job == nil || st.Job.PromptID != id || st.Job.Source != "proxy" {
		t.Fatalf("status during the job: %+v", st)
	}
	f.waitState(t, "idle after the job", func(st Status) bool { return st.State == "idle" })
	if jobs := f.m.get(&f.m.jobs); len(jobs) != 1 || jobs[0] != "success" {
		t.Fatalf("jobs ended %v, want one success", jobs)
	}
	if f.comfy.Frees() == 0 {
		t.Fatal("ComfyUI not freed after the job")
	}
	if h := f.g.History(time.Time{}).Jobs; len(h) != 1 || h[0].PromptID != id {
		t.Fatalf("history jobs %+v", h)
	}
}

func TestImageJobEndedWithoutSubmissionGivesTheGPUBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.WarmModel = "llama3.2" })
	job, err := f.g.BeginImage(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Prepare(); err != nil {
		t.Fatal(err)
	}
	job.End("rejected")
	f.waitState(t, "idle after the rejected prompt", func(st Status) bool { return st.State == "idle" && !st.Warming })
	if jobs := f.m.get(&f.m.jobs); len(jobs) != 0 {
		t.Fatalf("a prompt that queued nothing counted as a job: %v", jobs)
	}
	if f.ollama.Warmups() == 0 {
		t.Fatal("warm_model not loaded again after Ollama was emptied for the prompt")
	}
}

func TestImageJobRefusedWhenOllamaCannotBeEmptied(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.UnloadTimeout = 300 * time.Millisecond })
	f.loadModel(t, "llama3.2")
	f.ollama.SetUnloadStuck(true)
	job, err := f.g.BeginImage(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := job.Prepare(); err == nil {
		t.Fatal("Prepare succeeded with an Ollama that does not unload")
	}
	f.waitState(t, "idle after the refusal", func(st Status) bool { return st.State == "idle" })
	if errs := f.m.get(&f.m.errors); len(errs) == 0 || errs[0] != "ollama unload" {
		t.Fatalf("upstream errors %v, want ollama unload", errs)
	}
}

func TestHoldEmptiesBothAndEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.loadModel(t, "llama3.2")
	h, err := f.g.TakeHold(context.Background(), "game", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	st := f.g.Status()
	if st.State != "hold" || len(st.Holds) != 1 || st.Holds[0].Owner != "game" || st.Holds[0].Turnstile != "test" {
		t.Fatalf("status while held: %+v", st)
	}
	if len(f.ollama.Loaded()) != 0 || f.comfy.Frees() == 0 {
		t.Fatal("the hold began before Ollama was emptied and ComfyUI freed")
	}
	if f.g.FindHold(h.ID) != h {
		t.Fatal("FindHold does not find the hold")
	}
	if !h.End("released") || h.End("released") {
		t.Fatal("End must end a hold exactly once")
	}
	f.waitState(t, "idle after the hold", func(st Status) bool { return st.State == "idle" && len(st.Holds) == 0 })
	if ev := f.m.get(&f.m.holds); len(ev) != 2 || ev[0] != "granted" || ev[1] != "released" {
		t.Fatalf("hold events %v", ev)
	}
}

func TestHoldExpires(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	if _, err := f.g.TakeHold(context.Background(), "script", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, "idle once the hold expired", func(st Status) bool { return st.State == "idle" })
	if ev := f.m.get(&f.m.holds); len(ev) != 2 || ev[1] != "expired" {
		t.Fatalf("hold events %v", ev)
	}
}

func TestWorkQueuedDirectlyOnComfyUITakesTheGPU(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.waitState(t, "websocket up", func(st Status) bool {
		us := st.Upstreams["comfy"]
		return us.Websocket != nil && *us.Websocket
	})
	f.loadModel(t, "llama3.2")
	f.bypassed = true
	// The work runs until the test has seen the GPU taken for it: work
	// over before the turnstile looks is only owed a free.
	id := f.submitRunning(t, time.Hour) // started: an interrupt before is dropped
	st := f.waitState(t, "image for the direct work", func(st Status) bool { return st.State == "image" && st.Job != nil })
	if st.Job.Source != "comfyui" {
		t.Fatalf("job source %q, want comfyui", st.Job.Source)
	}
	if err := f.clients.comfy.Interrupt(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	f.waitState(t, "idle after the direct work", func(st Status) bool { return st.State == "idle" })
	if len(f.ollama.Loaded()) != 0 || f.comfy.Frees() == 0 {
		t.Fatalf("after the direct work: Ollama has %v loaded, ComfyUI freed %d times; want emptied and freed", f.ollama.Loaded(), f.comfy.Frees())
	}
}

func TestStartUpProbeHoldsTheGPUForQueuedWork(t *testing.T) {
	t.Parallel()
	card := gputest.New()
	srv := comfytest.NewServer(card, comfytest.Options{})
	defer srv.Close()
	srv.Submit(300 * time.Millisecond)
	cc, _ := comfy.NewClient(srv.URL, nil)
	g := New("probe", &recorder{})
	defer g.Close()
	c := testConfig()
	c.Images = []ImageEngine{comfyui.New("comfyui", cc, testComfyOptions)}
	g.Apply(c, zap.NewNop())
	if st := g.Status(); st.State != "image" || st.Job == nil {
		t.Fatalf("status at start-up %+v, want image for the probe", st)
	}
	if !g.lock.TryAcquireShared() {
		waitStatus(t, g, "the queued work letting the GPU go", func(st Status) bool { return st.State == "idle" })
		return
	}
	t.Fatal("an LLM request had the GPU while the start-up probe held it")
}

// A hold that inherits a free from the job before it settles the debt only
// with a free that did its job; a free that failed is made again when the
// hold ends, before LLM use.
func TestHoldKeepsTheFreeDebtWhenItsFreeFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.FreeTimeout = 300 * time.Millisecond })
	f.comfy.Submit(300 * time.Millisecond) // work queued directly: the GPU is ComfyUI's
	f.waitState(t, "the direct job holds the GPU", func(st Status) bool { return st.State == "image" })
	f.comfy.SetFreeStuck(true)
	held := make(chan *Hold, 1)
	go func() {
		h, err := f.g.TakeHold(context.Background(), "game", time.Minute)
		if err != nil {
			t.Error(err)
		}
		held <- h
	}()
	h := <-held
	if h == nil {
		return
	}
	if f.comfy.Reserved() == 0 {
		t.Fatal("the stuck free freed")
	}
	f.comfy.SetFreeStuck(false)
	frees := f.comfy.Frees()
	h.End("released")
	f.waitState(t, "idle after the hold", func(st Status) bool { return st.State == "idle" })
	if f.comfy.Frees() == frees || f.comfy.Reserved() != 0 {
		t.Fatalf("no free after the hold (frees %d -> %d, reserved %d): the failed free's debt was dropped",
			frees, f.comfy.Frees(), f.comfy.Reserved())
	}
}

func TestTryHoldRefusesWithoutWaiting(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.g.lock.TryAcquireShared() // an LLM request in flight
	if _, err := f.g.TryHold(context.Background(), "game", time.Minute); !errors.Is(err, ErrHoldBusy) {
		t.Fatalf("TryHold during LLM use: %v, want ErrHoldBusy", err)
	}
	if st := f.g.Status(); st.HoldWaiting != 0 || len(st.Holds) != 0 || st.State != "llm" {
		t.Fatalf("the refusal left a trace: %+v", st)
	}
	f.g.lock.ReleaseShared()
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
	h, err := f.g.TryHold(context.Background(), "game", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.g.TryHold(context.Background(), "second", time.Minute); !errors.Is(err, ErrHoldBusy) {
		t.Fatalf("TryHold during a hold: %v, want ErrHoldBusy", err)
	}
	h.End("released")
	f.waitState(t, "idle after the hold", func(st Status) bool { return st.State == "idle" && len(st.Holds) == 0 })
	if ev := f.m.get(&f.m.holds); len(ev) != 4 || ev[0] != "busy" || ev[1] != "granted" || ev[2] != "busy" || ev[3] != "released" {
		t.Fatalf("hold events %v", ev)
	}
}
