package gpu

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	a1111engine "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// TestCancelOfAnA1111JobBeforeItBegins cancels a synchronous A1111 job
// whose request has not reached A1111 yet. A1111 drops an interrupt that
// comes before the job begins (it clears the flag as a job begins), so
// the cancel sends it again until the job is stopped, and answers
// "interrupted" only because A1111 says the job was: after the job's end.
func TestCancelOfAnA1111JobBeforeItBegins(t *testing.T) {
	t.Parallel()
	f, srv := newA1111Fixture(t)
	card, g := f.card, f.g
	job := f.startJob(t)
	job.Submitting()
	ch := f.cancelAsync(t, job)
	f.waitTimeline(t, "the first interrupt, before the job", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "a1111", "interrupt while idle") >= 0
	})
	resp, err := http.Post(srv.URL()+"/sdapi/v1/txt2img", "application/json", strings.NewReader(`{"prompt":"x","steps":30}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	notYet(t, ch, "the job's request ended")
	job.Ran("success")
	r := <-ch
	if r.err != nil || r.res.Outcome != "interrupted" {
		t.Fatalf("cancel answered %+v, %v; want interrupted", r.res, r.err)
	}
	ev := card.Events()
	if gputest.Index(ev, 0, "a1111", "txt2img end: interrupted") < 0 {
		t.Fatalf("A1111 did not stop the job:\n%s", gputest.Dump(ev))
	}
	f.waitState(t, "idle after the job", func(st Status) bool { return st.State == "idle" })
	if h := g.History(time.Time{}).Jobs; len(h) != 1 || h[0].Outcome != "interrupted" {
		t.Fatalf("history %+v", h)
	}
}

// TestCancelOfAnA1111JobSparesUIWork cancels the turnstile's A1111 job
// while work from A1111's own UI runs ahead of it inside A1111: the
// interrupt, which names no job, is held back until that work has ended,
// and then stops the turnstile's job.
func TestCancelOfAnA1111JobSparesUIWork(t *testing.T) {
	t.Parallel()
	f, srv := newA1111Fixture(t)
	job := f.startJob(t)
	job.Submitting()
	ui := srv.StartUIJob(600 * time.Millisecond)
	f.waitTimeline(t, "the UI job running", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "a1111", "ui start") >= 0
	})
	ch := f.cancelAsync(t, job)
	sent := postTxt2img(srv)
	<-ui
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	job.Ran("success")
	r := <-ch
	ev := f.card.Events()
	if gputest.Index(ev, 0, "a1111", "ui end: interrupted") >= 0 {
		t.Fatalf("the cancel interrupted the UI's work:\n%s", gputest.Dump(ev))
	}
	if r.err != nil || r.res.Outcome != "interrupted" || gputest.Index(ev, 0, "a1111", "txt2img end: interrupted") < 0 {
		t.Fatalf("cancel answered %+v, %v; want the turnstile's job interrupted:\n%s", r.res, r.err, gputest.Dump(ev))
	}
}

// postTxt2img sends a txt2img straight to the fake A1111, as the handler
// forwards a job, and reports how the request ended.
func postTxt2img(srv *a1111test.Server) <-chan error {
	sent := make(chan error, 1)
	go func() {
		resp, err := http.Post(srv.URL()+"/sdapi/v1/txt2img", "application/json", strings.NewReader(`{"prompt":"x","steps":30}`))
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	return sent
}

// newA1111Fixture is a GPU orchestrated over the fake A1111 alone, idle.
func newA1111Fixture(t *testing.T) (*fixture, *a1111test.Server) {
	t.Helper()
	card := gputest.New()
	srv := a1111test.NewServer(card, a1111test.Options{JobDuration: 3 * time.Second})
	t.Cleanup(srv.Close)
	c, err := a1111.NewClient(srv.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Images = []ImageEngine{a1111engine.New("a1111", c, 20*time.Millisecond, 20*time.Millisecond)}
	g := New("test", &recorder{})
	t.Cleanup(g.Close)
	g.Apply(cfg, zap.NewNop())
	f := &fixture{g: g, card: card}
	f.waitState(t, "idle after the start-up probe", func(st Status) bool { return st.State == "idle" })
	return f, srv
}

// TestPreparedA1111JobEndedUnsentOwesAFree: A1111's checkpoint is put
// back on the GPU to ready a job (reload-checkpoint); a job that then
// ends unsent (its client gone, a cancel) has left it there, and the GPU
// is not given to anyone else before A1111 is freed.
func TestPreparedA1111JobEndedUnsentOwesAFree(t *testing.T) {
	t.Parallel()
	f, _ := newA1111Fixture(t)
	job := f.startJob(t)
	ev := f.card.Events()
	on := gputest.Index(ev, 0, "a1111", "(reload-checkpoint)")
	if on < 0 {
		t.Fatalf("the job was not readied:\n%s", gputest.Dump(ev))
	}
	job.End("cancelled")
	f.waitState(t, "idle", func(st Status) bool { return st.State == "idle" })
	if ev := f.card.Events(); gputest.Index(ev, on, "a1111", "checkpoint off GPU") < 0 {
		t.Fatalf("A1111 kept its checkpoint on the GPU after a job ended unsent:\n%s", gputest.Dump(ev))
	}
}

// TestCancelOfAnA1111JobWithUIWorkBehindIt: work from A1111's UI queued
// behind the turnstile's job begins as soon as the job has stopped, which
// clears A1111's interrupt flag before the job's request has returned;
// the job still counts as interrupted, since the interrupt was seen set
// on it while it ran.
func TestCancelOfAnA1111JobWithUIWorkBehindIt(t *testing.T) {
	t.Parallel()
	f, srv := newA1111Fixture(t)
	job := f.startJob(t)
	job.Submitting()
	sent := postTxt2img(srv)
	f.waitTimeline(t, "the job running", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "a1111", "txt2img start") >= 0
	})
	ui := srv.StartUIJob(200 * time.Millisecond) // waits behind the job in A1111's queue
	ch := f.cancelAsync(t, job)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	f.waitTimeline(t, "the UI's work begun", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "a1111", "ui start") >= 0
	})
	job.Ran("success")
	r := <-ch
	if r.err != nil || r.res.Outcome != "interrupted" {
		t.Fatalf("cancel answered %+v, %v; want interrupted:\n%s", r.res, r.err, gputest.Dump(f.card.Events()))
	}
	<-ui
	if ev := f.card.Events(); gputest.Index(ev, 0, "a1111", "ui end: interrupted") >= 0 {
		t.Fatalf("the cancel interrupted the UI's work:\n%s", gputest.Dump(ev))
	}
}
