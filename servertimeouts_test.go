package turnstile

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// exampleTimeouts is the servers block of Caddyfile.example's global
// options, each of its durations shortened to d.
func exampleTimeouts(t *testing.T, d string) string {
	t.Helper()
	b, err := os.ReadFile("Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)\n\tservers \{.*?\n\t\}\n`).Find(b)
	if block == nil {
		t.Fatal("no servers block in Caddyfile.example's global options")
	}
	return regexp.MustCompile(`\b\d+(ms|s|m|h)\b`).ReplaceAllString(string(block), d)
}

// TestExampleServerTimeoutsCutBodiesNotStreams runs Caddy with the server
// timeouts of Caddyfile.example, shortened to 400 ms: a trickled body is
// cut while it trickles, but a large body left part unread while it waits
// for the GPU, an event stream, a websocket and a long streamed
// generation outlive the timeouts several times over.
func TestExampleServerTimeoutsCutBodiesNotStreams(t *testing.T) {
	const timeout = 400 * time.Millisecond
	block := exampleTimeouts(t, timeout.String())
	h := newHarness(t, harnessOptions{edit: func(cf string) string {
		return strings.Replace(cf, "auto_https off\n", "auto_https off"+block, 1)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	// The GPU is free: the body goes on to Ollama, and Caddy cuts it: the
	// connection closes, or an answer comes, while the body still
	// trickles. (When the read deadline cancels the request's context
	// first, reverse_proxy answers 499 and Go's server may keep the
	// connection: the body is cut all the same.)
	if r := trickle(t, h.llm, "/api/chat", `{"model":"llama3.2","messages":[{"role":"user","content":"`); !r.sending || !(r.closed || r.answered) {
		t.Fatalf("trickled body: still sending %v, connection closed %v; want it cut while it trickles (answer %d %v %.300s)", r.sending, r.closed, r.status, r.header, r.body)
	}

	// A body larger than what is read before the wait (8 MiB) keeps its
	// rest unread while it waits behind a hold, past the timeouts: it is
	// still read in full once the GPU is free.
	hold := h.takeHold(t, "test", "1m")
	big := h.postAsync(ctx, h.llm+"/api/chat", bigChat(9<<20))
	h.waitStatus("the large chat waiting", func(st Status) bool { return st.LLMWaiting == 1 })
	<-time.After(3 * timeout)
	h.releaseHold(t, hold)
	if r := <-big; r.status != 200 || !strings.Contains(r.body, `"done":true`) {
		t.Fatalf("a 9 MiB chat that waited past the timeouts: %d %v %.300s", r.status, r.err, r.body)
	}
	h.waitIdle()

	events := openEvents(t, h.client, h.llm+"/healthz?view=events", "")
	conn, _, err := websocket.Dial(ctx, strings.Replace(h.image, "http", "ws", 1)+"/ws?clientId=browser", nil)
	if err != nil {
		t.Fatalf("websocket through caddy: %v", err)
	}
	defer conn.CloseNow()
	if _, _, err := conn.Read(ctx); err != nil {
		t.Fatalf("websocket's first frame: %v", err)
	}
	resume := h.ollama.HoldChats()
	finish := h.streamStart(ctx, "/api/chat", chatBody("llama3.2", true))
	events.next("the chat in flight", statusIs(func(st Status) bool { return st.LLMInflight == 1 }))

	// What is shown is that time passes: past every timeout, three times.
	<-time.After(3 * timeout)

	resume()
	if r := finish(); r.err != nil || !strings.Contains(r.body, `"done":true`) {
		t.Fatalf("a generation longer than the timeouts: %v %.300s", r.err, r.body)
	}
	events.next("the chat's end, on the stream opened before", statusIs(func(st Status) bool { return st.LLMInflight == 0 }))
	id := promptID(t, h.post(ctx, h.image+"/prompt", promptBody(10)))
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("the websocket opened before the timeouts: %v", err)
		}
		if strings.Contains(string(msg), id) {
			break // the job's broadcast came
		}
	}
	h.waitIdle()
}
