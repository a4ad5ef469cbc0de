package turnstile

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// sseEvent is one event of the stream as a client reads it.
type sseEvent struct {
	name, data string
}

// eventStream reads Server-Sent Events from an open response.
type eventStream struct {
	t    *testing.T
	resp *http.Response
	ch   chan sseEvent
}

// openEvents opens the status handler's event stream at url with the
// given Accept header ("" for none).
func openEvents(t *testing.T, client *http.Client, url, accept string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("event stream: %d %s", resp.StatusCode, ct)
	}
	s := &eventStream{t: t, resp: resp, ch: make(chan sseEvent, 1024)}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	go s.read(resp.Body)
	return s
}

func (s *eventStream) read(body io.Reader) {
	defer close(s.ch)
	var ev sseEvent
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name != "" {
				s.ch <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// next returns the next event for which match holds, failing the test
// after 15 s; the events skipped are returned too.
func (s *eventStream) next(what string, match func(sseEvent) bool) (sseEvent, []sseEvent) {
	s.t.Helper()
	var skipped []sseEvent
	timeout := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-s.ch:
			if !ok {
				s.t.Fatalf("stream ended waiting for %s; skipped %v", what, skipped)
			}
			if match(ev) {
				return ev, skipped
			}
			skipped = append(skipped, ev)
		case <-timeout:
			s.t.Fatalf("timed out waiting for %s; skipped %v", what, skipped)
		}
	}
}

func statusIs(cond func(Status) bool) func(sseEvent) bool {
	return func(ev sseEvent) bool {
		if ev.name != "status" {
			return false
		}
		var st Status
		if err := json.Unmarshal([]byte(ev.data), &st); err != nil {
			panic(fmt.Sprintf("status event %s: %v", ev.data, err))
		}
		return cond(st)
	}
}

// TestEventStreamFollowsTheGPU watches the stream through a real Caddy
// while a chat runs, an image job queues behind it and a chat waits
// behind that: the status at once, each state in order with its counts
// and waiters, the unload and the free as steps, and the job's end.
func TestEventStreamFollowsTheGPU(t *testing.T) {
	h := newHarness(t, harnessOptions{comfy: comfyOpts(time.Hour)})
	h.waitIdle() // the start-up probe and free
	for _, open := range []struct{ query, accept string }{{"?view=events", ""}, {"", "text/event-stream"}} {
		s := openEvents(t, h.client, h.llm+"/healthz"+open.query, open.accept)
		if ev, skipped := s.next("the first status", func(sseEvent) bool { return true }); ev.name != "status" ||
			!strings.HasPrefix(ev.data, `{"state":"idle","llm_inflight":0,"image_pending":false,`) || len(skipped) > 0 {
			t.Fatalf("first event %+v", ev)
		}
	}
	// The full view, which names the waiters' paths and the job's prompt_id.
	s := openEvents(t, h.client, h.llm+"/healthz/full?view=events", "")
	s.next("the first status", func(sseEvent) bool { return true })

	resume := h.ollama.HoldChats()
	finish := h.streamStart(context.Background(), "/api/chat", chatBody("llama3.2", true))
	s.next("llm with one request", statusIs(func(st Status) bool { return st.State == "llm" && st.LLMInflight == 1 }))
	img := h.postAsync(context.Background(), h.image+"/prompt", promptBody(3_600_000))
	s.next("the image job waiting", statusIs(func(st Status) bool {
		return st.ImageWaiting == 1 && len(st.Waiters) == 1 && st.Waiters[0].Kind == "image" && st.Waiters[0].Path == "/prompt"
	}))
	chat := h.postAsync(context.Background(), h.llm+"/api/chat", chatBody("qwen3:8b", false))
	s.next("the chat waiting by name", statusIs(func(st Status) bool {
		return len(st.Waiters) == 2 && st.Waiters[1].Kind == "llm" && st.Waiters[1].Model == "qwen3:8b" && st.Waiters[1].Path == "/api/chat"
	}))
	resume()
	finish()
	s.next("the image state", statusIs(func(st Status) bool { return st.State == "image" }))
	s.next("the unload step", func(ev sseEvent) bool { return ev.name == "step" && strings.Contains(ev.data, `"kind":"unload"`) })
	id := promptID(t, <-img)
	s.next("the job running", statusIs(func(st Status) bool { return st.Job != nil && st.Job.PromptID == id && st.Job.Phase == "running" }))
	h.interruptRunning(h.comfy.URL)
	job, _ := s.next("the job's end", func(ev sseEvent) bool { return ev.name == "job" })
	var je gpu.JobEvent
	if err := json.Unmarshal([]byte(job.data), &je); err != nil || je.PromptID != id || je.Outcome != "interrupted" || je.Turnstile != "default" {
		t.Fatalf("job event %s (%v)", job.data, err)
	}
	s.next("the free step", func(ev sseEvent) bool { return ev.name == "step" && strings.Contains(ev.data, `"kind":"free"`) })
	s.next("the waiting chat served", statusIs(func(st Status) bool { return st.State == "llm" && len(st.Waiters) == 0 }))
	if r := <-chat; r.status != http.StatusOK {
		t.Fatalf("waiting chat: %d %s", r.status, r.body)
	}
	s.next("idle", statusIs(func(st Status) bool { return st.State == "idle" }))
}

// TestEventStreamKeepsAlive checks, on a fake clock, that an idle stream
// gets a comment line well within 15 s, and that the stream ends when the
// config that serves it is unloaded.
// TestEventStreamEndsOnReload checks that a config reload ends the
// streams of the old config at once (the browser reconnects to the new
// one), rather than waiting for them.
func TestEventStreamEndsOnReload(t *testing.T) {
	opts := harnessOptions{}
	h := newHarness(t, opts)
	s := openEvents(t, h.client, h.llm+"/healthz?view=events", "")
	s.next("the first status", func(sseEvent) bool { return true })
	h.load(h.caddyfile(opts))
	timeout := time.After(15 * time.Second)
	for {
		select {
		case _, ok := <-s.ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the stream outlived the config that served it")
		}
	}
}
