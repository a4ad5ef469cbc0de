package llamacpptest_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

// Fact: chat answers in OpenAI's shape: a chat.completion, or with
// "stream":true server-sent events `data: {...}\n\n` of
// chat.completion.chunk objects, ending `data: [DONE]\n\n`.
func TestChatAnswersInOpenAIShape(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{Tokens: 3})
	a := post(t, srv, "/v1/chat/completions", chat(qwen, false))
	var c struct {
		Object  string
		Model   string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
	}
	if err := json.Unmarshal([]byte(a.body), &c); err != nil || a.status != 200 || c.Object != "chat.completion" ||
		c.Model != qwen || len(c.Choices) != 1 || c.Choices[0].Message.Content == "" || c.Choices[0].FinishReason != "stop" {
		t.Fatalf("chat: %d %s", a.status, a.body)
	}
	waitEvent(t, gpu, "chat "+qwen+" served")

	a = post(t, srv, "/chat/completions", chat(qwen, true))
	if ct := a.header.Get("Content-Type"); a.status != 200 || ct != "text/event-stream" {
		t.Fatalf("stream: %d %q", a.status, ct)
	}
	events := strings.SplitAfter(a.body, "\n\n")
	if events[len(events)-1] == "" {
		events = events[:len(events)-1]
	}
	if events[len(events)-1] != "data: [DONE]\n\n" {
		t.Fatalf("stream does not end with [DONE]: %q", a.body)
	}
	content := ""
	for _, e := range events[:len(events)-1] {
		var chunk struct {
			Object  string
			Choices []struct{ Delta struct{ Content *string } }
		}
		data, ok := strings.CutPrefix(e, "data: ")
		if !ok || json.Unmarshal([]byte(data), &chunk) != nil || chunk.Object != "chat.completion.chunk" {
			t.Fatalf("event %q is not a data: chat.completion.chunk", e)
		}
		if d := chunk.Choices[0].Delta.Content; d != nil {
			content += *d
		}
	}
	if content != "tok0 tok1 tok2 " {
		t.Fatalf("streamed content %q, want the 3 tokens", content)
	}
}

// The other model routes answer in their shapes (not pinned by the sheet
// beyond being served by the model).
func TestModelRoutesAreServed(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, llamacpptest.Options{})
	for path, key := range map[string]string{
		"/completion": `"content"`, "/completions": `"content"`, "/v1/completions": `"text_completion"`,
		"/responses": `"response"`, "/v1/responses": `"response"`, "/infill": `"content"`,
		"/embedding": `"embedding"`, "/embeddings": `"embedding"`, "/v1/embeddings": `"embedding"`,
		"/rerank": `"relevance_score"`, "/reranking": `"relevance_score"`, "/v1/rerank": `"relevance_score"`, "/v1/reranking": `"relevance_score"`,
		"/tokenize": `"tokens"`, "/detokenize": `"content"`, "/apply-template": `"prompt"`,
	} {
		if a := post(t, srv, path, modelBody(qwen)); a.status != 200 || !strings.Contains(a.body, key) {
			t.Errorf("POST %s: %d %s, want 200 with %s", path, a.status, a.body, key)
		}
	}
	if n := srv.Requests(); n != 16 {
		t.Errorf("Requests %d, want 16", n)
	}
}

// Fact (from the source): a generation running on a child that is told
// to exit is cut when the child exits. The router relays a stream as
// complete (no [DONE]); a request that had no answer yet gets the proxy
// error.
func TestGenerationIsCutWhenItsChildExits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		stream bool
		status int
		check  func(body string) bool
	}{
		{true, 200, func(b string) bool { return strings.HasPrefix(b, "data: ") && !strings.Contains(b, "[DONE]") }},
		{false, 500, func(b string) bool { return b == "proxy error: Failed to read connection" }},
	} {
		srv, gpu := newFake(t, llamacpptest.Options{})
		resume := srv.HoldChats()
		defer resume()
		got := make(chan answer, 1)
		go func() { got <- post(t, srv, "/v1/chat/completions", chat(qwen, tc.stream)) }()
		waitEvent(t, gpu, "request /v1/chat/completions "+qwen)
		post(t, srv, "/models/unload", modelBody(qwen))
		a := <-got
		if a.status != tc.status || !tc.check(a.body) {
			t.Errorf("stream=%v: cut answer %d %q", tc.stream, a.status, a.body)
		}
		ev := gpu.Events()
		if exit, cut := gputest.Index(ev, 0, "llamacpp", "exit "+qwen), gputest.Index(ev, 0, "llamacpp", "cut "); exit < 0 || cut < exit {
			t.Errorf("stream=%v: want the cut at the exit:\n%s", tc.stream, gputest.Dump(ev))
		}
	}
}

// HoldChats holds a generation after its first token until resumed.
func TestHoldChatsHoldsGenerations(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, llamacpptest.Options{})
	resume := srv.HoldChats()
	got := make(chan answer, 1)
	go func() { got <- post(t, srv, "/v1/chat/completions", chat(qwen, false)) }()
	waitEvent(t, gpu, "request /v1/chat/completions "+qwen)
	// Other routes are not held.
	if a := post(t, srv, "/tokenize", modelBody(qwen)); a.status != 200 {
		t.Fatalf("tokenize while chats are held: %d", a.status)
	}
	select {
	case a := <-got:
		t.Fatalf("a held chat answered: %d %s", a.status, a.body)
	default:
	}
	if gputest.Index(gpu.Events(), 0, "llamacpp", "chat "+qwen+" served") >= 0 {
		t.Fatal("a held chat was served")
	}
	resume()
	select {
	case a := <-got:
		if a.status != 200 {
			t.Fatalf("resumed chat: %d %s", a.status, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the chat did not resume")
	}
}
