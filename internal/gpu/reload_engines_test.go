package gpu

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	a1111engine "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/comfyui"
	vllmengine "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/vllm"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/presence"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// TestEngineAddedByAReloadIsProbedAndFreed: a reload adds an A1111 that
// loaded its checkpoint at launch. It is probed as at start-up, with the
// GPU alone, and freed before anything else has the GPU.
func TestEngineAddedByAReloadIsProbedAndFreed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	srv := a1111test.NewServer(f.card, a1111test.Options{})
	t.Cleanup(srv.Close)
	ac, err := a1111.NewClient(srv.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c2 := *f.cfg
	c2.Images = append(append([]ImageEngine(nil), f.cfg.Images...), a1111engine.New("a1111", ac, 20*time.Millisecond, 20*time.Millisecond))
	f.g.Apply(&c2, zap.NewNop())
	f.waitTimeline(t, "the added A1111 freed", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "a1111", "checkpoint off GPU") >= 0
	})
	f.waitState(t, "idle after the probe", func(st Status) bool { return st.State == "idle" && !f.g.Probing() })
	if srv.OnGPU() {
		t.Fatal("the added A1111 still holds its checkpoint")
	}
}

// TestStartUpProbeErrorOwesAFree: A1111's queue cannot be read at
// start-up (a 503 while it starts, say): that is no proof that it holds
// nothing, and it is freed before LLM use.
func TestStartUpProbeErrorOwesAFree(t *testing.T) {
	t.Parallel()
	card := gputest.New()
	srv := a1111test.NewServer(card, a1111test.Options{})
	defer srv.Close()
	up, _ := url.Parse(srv.URL())
	rp := httputil.NewSingleHostReverseProxy(up)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sdapi/v1/progress" {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	defer front.Close()
	ac, _ := a1111.NewClient(front.URL, nil)
	c := testConfig()
	c.ProbeTimeout = 300 * time.Millisecond
	c.Images = []ImageEngine{a1111engine.New("a1111", ac, 20*time.Millisecond, 20*time.Millisecond)}
	g := New("t", &recorder{})
	defer g.Close()
	g.Apply(c, zap.NewNop())
	waitIdle(t, g)
	if srv.OnGPU() {
		t.Fatalf("LLM use may begin while A1111's checkpoint is on the GPU (unloads %d)", srv.Unloads())
	}
}

// TestReloadKeepsVLLMAsleep: a reload makes a new vLLM adapter while an
// image job runs and another waits. The GPU passes from one job to the
// next with no free between, and the new adapter must not wake vLLM
// beside ComfyUI's models: it knows, from the old one, that vLLM sleeps
// because the turnstile put it to sleep.
func TestReloadKeepsVLLMAsleep(t *testing.T) {
	t.Parallel()
	card := gputest.New()
	vs := vllmtest.NewServer(card, vllmtest.Options{})
	defer vs.Close()
	cs := comfytest.NewServer(card, comfytest.Options{JobDuration: 50 * time.Millisecond, HistoryLag: 5 * time.Millisecond})
	defer cs.Close()
	vc, _ := vllm.NewClient(vs.URL(), nil)
	cc, _ := comfy.NewClient(cs.URL, nil)
	c1 := testConfig()
	c1.LLMs = []LLMEngine{vllmengine.New("vllm", vc, 20*time.Millisecond)}
	c1.Images = []ImageEngine{comfyui.New("comfyui", cc, testComfyOptions)}
	g := New("t", &recorder{})
	defer g.Close()
	g.Apply(c1, zap.NewNop())
	waitIdle(t, g)
	f := &fixture{g: g, card: card}

	j1 := f.startJob(t)
	j1.Submitting()
	id := cs.Submit(300 * time.Millisecond)
	next := make(chan *ImageJob, 1)
	go func() {
		j, err := g.BeginImage(context.Background(), "")
		if err != nil {
			t.Error(err)
		}
		next <- j
	}()
	f.waitState(t, "the second job waiting", func(st Status) bool { return st.ImageWaiting == 1 })
	c2 := *c1
	c2.LLMs = []LLMEngine{vllmengine.New("vllm", vc, 20*time.Millisecond)}
	g.Apply(&c2, zap.NewNop())
	j1.Submitted(id)
	j2 := <-next
	if j2 == nil {
		return
	}
	if err := j2.Prepare(); err != nil {
		t.Fatal(err)
	}
	j2.End("rejected")
	waitIdle(t, g)
	if o := card.Overlaps(); len(o) > 0 {
		t.Fatalf("GPU shared: %v\n%s", o, gputest.Dump(card.Events()))
	}
}

// TestVLLMSleepCutByTheTimeoutIsWokenAfter: vLLM takes longer to sleep
// than unload_timeout, so the job is refused; vLLM falls asleep all the
// same, and must be woken before LLM use, or its requests would queue
// inside it with nobody to wake it.
func TestVLLMSleepCutByTheTimeoutIsWokenAfter(t *testing.T) {
	t.Parallel()
	card := gputest.New()
	vs := vllmtest.NewServer(card, vllmtest.Options{SleepDelay: 400 * time.Millisecond})
	defer vs.Close()
	vc, _ := vllm.NewClient(vs.URL(), nil)
	c := testConfig()
	c.UnloadTimeout = 150 * time.Millisecond
	c.LLMs = []LLMEngine{vllmengine.New("vllm", vc, 20*time.Millisecond)}
	c.Images = []ImageEngine{&fakeImage{name: "img"}}
	g := New("t", &recorder{})
	defer g.Close()
	g.Apply(c, zap.NewNop())
	waitIdle(t, g)
	j, err := g.BeginImage(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Prepare(); err == nil {
		t.Fatal("the job was readied although vLLM's sleep outlasted unload_timeout")
	}
	if !card.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "vllm", "sleep answered") >= 0 }) {
		t.Fatalf("vLLM never slept:\n%s", gputest.Dump(card.Events()))
	}
	// The wake is confirmed before the engine's record says ready.
	waitStatus(t, g, "vLLM woken", func(st Status) bool {
		return len(st.Engines) > 0 && st.Engines[0].State == "ready" && !g.isOwed(g.cfg().LLMs[0])
	})
	if vs.Sleeping() {
		t.Fatalf("vLLM left asleep (wakes %d):\n%s", vs.Wakes(), gputest.Dump(card.Events()))
	}
}

// switchSampler is a hold_while condition a test switches.
type switchSampler struct{ on atomic.Bool }

func (s *switchSampler) Sample(context.Context) (string, bool, error) {
	return "process:game", s.on.Load(), nil
}
func (s *switchSampler) String() string { return "process game" }

// TestPresenceHoldTakenAcrossAReloadIsReleased: a reload keeps a
// hold_while condition whose hold is still being taken (queued behind a
// hold). The hold must end once the condition clears, whichever watch
// took it.
func TestPresenceHoldTakenAcrossAReloadIsReleased(t *testing.T) {
	t.Parallel()
	s := &switchSampler{}
	f := newFixture(t, func(c *Config) {
		c.Presence = []presence.Sampler{s}
		c.PresencePoll, c.HoldReleaseAfter = 10*time.Millisecond, 50*time.Millisecond
	})
	blocker, err := f.g.TakeHold(context.Background(), "blocker", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s.on.Store(true)
	f.waitState(t, "the presence hold waits", func(st Status) bool { return st.HoldWaiting == 1 })
	c2 := *f.cfg
	f.g.Apply(&c2, zap.NewNop())
	f.waitState(t, "the new watch engaged", func(st Status) bool { return len(st.Presence) == 1 && st.Presence[0].Engaged })
	blocker.End("released")
	f.waitState(t, "the presence hold granted", func(st Status) bool {
		return len(st.Holds) == 1 && st.Holds[0].Source == "presence"
	})
	s.on.Store(false) // the game has gone
	f.waitState(t, "the GPU given back once the condition cleared", func(st Status) bool {
		return st.State != "hold" && len(st.Holds) == 0 && st.HoldWaiting == 0
	})
}

// TestFailedForwardOwesAFree: a forward that broke off may have left the
// prompt with ComfyUI, which then runs it: ComfyUI is freed before LLM
// use, as after a job.
func TestFailedForwardOwesAFree(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	frees := f.comfy.Frees()
	job := f.startJob(t)
	job.Submitting()
	job.End("failed")
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
	if f.comfy.Frees() == frees {
		t.Fatal("ComfyUI not freed after a forward that failed")
	}
}

// TestEngineBackUpOwesAFree: an image engine whose watch comes back up
// may have restarted, and loaded memory on its own at launch (A1111's
// checkpoint): it owes a free from then on, which is taken at once
// (freeAfterReturn), and held here until the test has looked. The
// engine's own watch never reports: what it reports is the test's alone.
func TestEngineBackUpOwesAFree(t *testing.T) {
	t.Parallel()
	img := &fakeImage{}
	f := newFixture(t, func(c *Config) { c.Images = []ImageEngine{img} })
	img.freeing = make(chan struct{}) // the start-up's free is over: frees from now on wait
	f.g.withRun(img, func(r *engineRun) { r.owed = false })
	f.g.reportWatch(img, true, nil) // the first contact: the start-up probe's to judge
	f.g.reportWatch(img, false, context.DeadlineExceeded)
	if f.g.isOwed(img) {
		t.Fatal("an engine that went down owes a free")
	}
	frees := img.frees.Load()
	f.g.reportWatch(img, true, nil)
	if !f.g.isOwed(img) {
		t.Fatal("an engine back up owes no free")
	}
	close(img.freeing)
	f.waitState(t, "the free owed paid", func(Status) bool { return img.frees.Load() > frees && !f.g.isOwed(img) })
}

// TestDirectWorkOverWhenSeenOwesAFree: work started on ComfyUI directly
// that has ended by the time the turnstile looks may have left its models
// loaded: ComfyUI owes a free.
func TestDirectWorkOverWhenSeenOwesAFree(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	f.g.withRun(f.cfg.Images[0], func(r *engineRun) { r.owed = false })
	if !f.g.takeDirect(f.cfg.Images[0]) {
		t.Fatal("direct work not taken")
	}
	f.g.runDirect("comfyui") // the queue is empty
	if !f.g.isOwed(f.cfg.Images[0]) {
		t.Fatal("direct work over when seen owes no free")
	}
}

// TestRestoredHoldFreesTheImageEngines: a hold restored at start-up takes
// the GPU before the image engines are probed; A1111, which loaded its
// checkpoint at launch, is freed for it all the same.
func TestRestoredHoldFreesTheImageEngines(t *testing.T) {
	t.Parallel()
	card := gputest.New()
	srv := a1111test.NewServer(card, a1111test.Options{})
	defer srv.Close()
	ac, _ := a1111.NewClient(srv.URL(), nil)
	now := time.Now()
	c := testConfig()
	c.Images = []ImageEngine{a1111engine.New("a1111", ac, 20*time.Millisecond, 20*time.Millisecond)}
	c.HoldStore = &memStore{recs: map[string]SavedHold{
		"live": {ID: "live", Owner: "game", TTL: time.Minute, Since: now, ExpiresAt: now.Add(time.Minute)},
	}}
	g := New("t", &recorder{})
	defer g.Close()
	g.Apply(c, zap.NewNop())
	if waitRestored(t, g, "live") == nil {
		t.Fatal("the hold was not restored")
	}
	if !card.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "a1111", "checkpoint off GPU") >= 0 }) {
		t.Fatalf("A1111 kept its checkpoint through the restored hold:\n%s", gputest.Dump(card.Events()))
	}
}

// TestCloseWithARestoredHold: Caddy stops while a hold restored at
// start-up holds the GPU and the start-up probe waits behind it. Close
// ends the hold, the probe gets the GPU as Close runs, and Close returns.
func TestCloseWithARestoredHold(t *testing.T) {
	t.Parallel()
	now := time.Now()
	c := testConfig()
	c.Images = []ImageEngine{&fakeImage{name: "img"}}
	c.HoldStore = &memStore{recs: map[string]SavedHold{
		"live": {ID: "live", Owner: "game", TTL: time.Minute, Since: now, ExpiresAt: now.Add(time.Minute)},
	}}
	g := New("t", &recorder{})
	g.Apply(c, zap.NewNop())
	h := waitRestored(t, g, "live")
	if h == nil {
		t.Fatal("the hold was not restored")
	}
	<-h.ready
	closed := make(chan struct{})
	go func() {
		g.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with a restored hold and the start-up probe behind it")
	}
}

// waitRestored waits for the start-up to restore the hold id, and returns
// it (nil if it was not within 10 s).
func waitRestored(t *testing.T, g *GPU, id string) *Hold {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	g.WaitStatus(ctx, func(st Status) bool { return len(st.Holds) > 0 })
	return g.FindHold(id)
}
