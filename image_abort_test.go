package turnstile

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// TestA1111AnswerCutByAGoneClient: a client that gives up during an A1111
// render. The forward goes on detached, and when A1111 answers, copying
// its megabytes to the closed connection fails: reverse_proxy aborts the
// handler with a panic. The job must still end and the GPU go back.
func TestA1111AnswerCutByAGoneClient(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"ollama", "a1111"},
		a1111: a1111test.Options{JobDuration: 300 * time.Millisecond, ImageBytes: 16 << 20}})
	m.waitIdle()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.sites["a1111"]+"/sdapi/v1/txt2img", strings.NewReader(txt2imgBody()))
	req.Header.Set("Content-Type", "application/json")
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		if resp, err := m.client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	m.waitTimeline("the job running", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "a1111", "txt2img start") >= 0
	})
	cancel() // the client goes; its connection closes
	<-answered
	m.waitTimeline("the job's end", func(ev []gputest.Event) bool {
		return gputest.Index(ev, 0, "a1111", "txt2img end") >= 0
	})
	m.waitStatus("idle after the job, its answer cut", func(st Status) bool { return st.State == "idle" })
	if jobs := m.ts().gpu.History(time.Time{}).Jobs; len(jobs) != 1 || jobs[0].Outcome != "success" {
		t.Fatalf("jobs %+v, want one, made if not delivered", jobs)
	}
}
