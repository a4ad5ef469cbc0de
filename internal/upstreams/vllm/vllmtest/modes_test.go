package vllmtest_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// Mode abort ends the requests in flight at once: vLLM finishes them with
// finish_reason "abort" (a stream's last chunk, then [DONE]; a plain answer
// is a 200 with what was generated), and then sleeps.
func TestSleepModeAbortEndsRequestsInFlight(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, vllmtest.Options{})
	srv.HoldChats() // never resumed: only the abort ends them
	stream, plain := goChat(t, srv, true), goChat(t, srv, false)
	waitTokens(t, gpu, 2)
	if a := send(t, http.MethodPost, srv.URL()+"/sleep?level=1&mode=abort", ""); a.status != 200 || gpu.Users("vllm") != 0 {
		t.Fatalf("sleep: %d %s, %d users", a.status, a.body, gpu.Users("vllm"))
	}
	if s := <-stream; s.status != 200 || !strings.Contains(s.body, `"finish_reason":"abort"`) || !strings.HasSuffix(s.body, "data: [DONE]\n\n") {
		t.Fatalf("aborted stream: %d %s", s.status, s.body)
	}
	if p := <-plain; p.status != 200 || !strings.Contains(p.body, `"finish_reason":"abort"`) || !strings.Contains(p.body, `"content":"tok0 "`) {
		t.Fatalf("aborted answer: %d %s", p.status, p.body)
	}
}

// Mode wait lets the requests in flight finish before the engine sleeps;
// /sleep answers after them, while new requests already queue.
func TestSleepModeWaitLetsRequestsFinish(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, vllmtest.Options{SleepDelay: time.Millisecond})
	resume := srv.HoldChats()
	inFlight := goChat(t, srv, true)
	waitTokens(t, gpu, 1)
	sleep := goSend(t, http.MethodPost, srv.URL()+"/sleep?level=1&mode=wait")
	pause := waitEvent(t, gpu, 0, "pause, mode wait, for level 1")
	late := goChat(t, srv, false)
	waitEvent(t, gpu, pause, "queued")
	if !never(gpu, "sleep level 1", 100*time.Millisecond) {
		t.Fatal("the engine slept before its request in flight finished")
	}
	resume()
	if a := <-sleep; a.status != 200 {
		t.Fatalf("sleep: %d %s", a.status, a.body)
	}
	ev := gpu.Events()
	finished, freed := gputest.Index(ev, 0, "vllm", "finished /v1/chat/completions stop"), gputest.Index(ev, 0, "vllm", "sleep level 1")
	if finished < 0 || freed < finished {
		t.Fatalf("slept before the request finished:\n%s", gputest.Dump(ev))
	}
	if a := <-inFlight; !strings.Contains(a.body, `"finish_reason":"stop"`) {
		t.Fatalf("the request in flight: %s", a.body)
	}
	send(t, http.MethodPost, srv.URL()+"/wake_up", "")
	if a := <-late; a.status != 200 {
		t.Fatalf("the request queued during the wait: %d %s", a.status, a.body)
	}
}

// Mode keep pauses the requests in flight and resumes them after the wake,
// where they finish normally.
func TestSleepModeKeepPausesRequestsUntilTheWake(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, vllmtest.Options{})
	resume := srv.HoldChats()
	inFlight := goChat(t, srv, true)
	waitTokens(t, gpu, 1)
	if a := send(t, http.MethodPost, srv.URL()+"/sleep?level=1&mode=keep", ""); a.status != 200 {
		t.Fatalf("sleep: %d %s", a.status, a.body)
	}
	resume() // free of the hold, the request must still not step
	if !never(gpu, "finished", 100*time.Millisecond) {
		t.Fatal("a kept request went on while the engine slept")
	}
	send(t, http.MethodPost, srv.URL()+"/wake_up", "")
	if a := <-inFlight; a.status != 200 || !strings.Contains(a.body, "tok4") || !strings.Contains(a.body, `"finish_reason":"stop"`) {
		t.Fatalf("the kept request: %d %s", a.status, a.body)
	}
}

// waitTokens waits until n requests have produced their first token
// (where HoldChats holds them).
func waitTokens(t *testing.T, gpu *gputest.GPU, n int) {
	t.Helper()
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return count(ev, "generating") >= n }) {
		t.Fatalf("fewer than %d requests generating:\n%s", n, gputest.Dump(gpu.Events()))
	}
}

func count(events []gputest.Event, substr string) int {
	n := 0
	for _, e := range events {
		if strings.Contains(e.What, substr) {
			n++
		}
	}
	return n
}
