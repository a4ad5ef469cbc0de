package turnstile

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ollamaapi "github.com/ollama/ollama/api"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// A streaming chat request that waits for the GPU with wait_notice on is
// told why in its own stream, then gets the engine's: through the real
// clients, during an image job.

var (
	waitingText = regexp.MustCompile(`^waiting for the GPU: an image job is running \(\d+ s so far; 1st in line(, expected to start in (a moment|about \d+ (s|min)))?\)$`)
	waitedText  = regexp.MustCompile(`^waited \d+ s for the GPU: an image job$`)
)

// startImageJob queues a long job on the fake ComfyUI behind site and
// waits until it holds the GPU; interruptRunning ends it.
func startImageJob(h *harness, site string) {
	h.t.Helper()
	promptID(h.t, h.post(context.Background(), site+"/prompt", promptBody(60_000)))
	h.waitStatus("the image job holds the GPU", func(st Status) bool { return st.State == "image" })
}

// recv waits for a notice.
func recv(t *testing.T, what string, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(15 * time.Second):
		t.Fatalf("no %s", what)
		return ""
	}
}

// streamed is what a client read of one stream.
type streamed struct {
	notices []string // in order
	content string
	// noticeAfterContent is set if a notice came after the answer began.
	noticeAfterContent bool
	done               bool
	err                error
}

func (s *streamed) add(notice, content string) {
	if notice != "" {
		s.notices = append(s.notices, notice)
		s.noticeAfterContent = s.noticeAfterContent || s.content != ""
	}
	s.content += content
}

// check fails the test unless s waited with notices and then got the
// whole answer.
func (s streamed) check(t *testing.T, what string) {
	t.Helper()
	if s.err != nil || s.content == "" || s.noticeAfterContent || len(s.notices) < 3 {
		t.Fatalf("%s: %+v", what, s)
	}
	for _, n := range s.notices[:len(s.notices)-1] {
		if !waitingText.MatchString(n) {
			t.Errorf("%s: notice %q", what, n)
		}
	}
	if last := s.notices[len(s.notices)-1]; !waitedText.MatchString(last) {
		t.Errorf("%s: last notice %q", what, last)
	}
}

// recorder is a proxy in front of an engine that keeps the bodies of the
// requests it passes on.
type recorder struct {
	*httptest.Server
	target atomic.Pointer[url.URL]
	mu     sync.Mutex
	bodies []string
}

func newRecorder(t *testing.T) *recorder {
	rec := &recorder{}
	proxy := &httputil.ReverseProxy{FlushInterval: -1, Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(rec.target.Load()) }}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.bodies = append(rec.bodies, string(b))
		rec.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) saw(s string) bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, b := range rec.bodies {
		if strings.Contains(b, s) {
			return true
		}
	}
	return false
}

// Ollama's /api/chat and /api/generate, read by Ollama's Go client
// through Caddy's encode: the notices arrive while the job runs, then
// the whole answer; a model the engine refuses gives a last error chunk
// the client returns; a request that does not stream gets no notice;
// Ollama never sees one.
func TestWaitNoticeOllama(t *testing.T) {
	rec := newRecorder(t)
	h := newHarness(t, harnessOptions{settings: "wait_notice 200ms", site: "encode gzip", ollamaURL: rec.URL,
		beforeLoad: func(h *harness) { u, _ := url.Parse(h.ollama.URL); rec.target.Store(u) }})
	startImageJob(h, h.image)
	base, _ := url.Parse(h.llm)
	c := ollamaapi.NewClient(base, h.client)
	ctx := context.Background()
	msgs := []ollamaapi.Message{{Role: "user", Content: "hi"}}

	chatNotices, genNotices, failNotices := make(chan string, 100), make(chan string, 100), make(chan string, 100)
	chat, gen, fail := make(chan streamed, 1), make(chan streamed, 1), make(chan streamed, 1)
	go func() {
		var s streamed
		s.err = c.Chat(ctx, &ollamaapi.ChatRequest{Model: "llama3.2", Messages: msgs}, func(r ollamaapi.ChatResponse) error {
			s.add(r.Message.Thinking, r.Message.Content)
			s.done = s.done || r.Done
			if r.Message.Thinking != "" {
				chatNotices <- r.Message.Thinking
			}
			return nil
		})
		chat <- s
	}()
	go func() {
		var s streamed
		s.err = c.Generate(ctx, &ollamaapi.GenerateRequest{Model: "qwen3:8b", Prompt: "hi"}, func(r ollamaapi.GenerateResponse) error {
			s.add(r.Thinking, r.Response)
			s.done = s.done || r.Done
			if r.Thinking != "" {
				genNotices <- r.Thinking
			}
			return nil
		})
		gen <- s
	}()
	go func() {
		var s streamed
		s.err = c.Chat(ctx, &ollamaapi.ChatRequest{Model: "no-such-model", Messages: msgs}, func(r ollamaapi.ChatResponse) error {
			s.add(r.Message.Thinking, r.Message.Content)
			failNotices <- r.Message.Thinking
			return nil
		})
		fail <- s
	}()
	quiet := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	for range 2 {
		recv(t, "chat notice", chatNotices)
		recv(t, "generate notice", genNotices)
	}
	recv(t, "notice before the engine's error", failNotices)
	h.waitStatus("the quiet request waits", func(st Status) bool { return st.LLMWaiting == 4 })
	h.interruptRunning(h.image)

	(<-chat).check(t, "chat")
	(<-gen).check(t, "generate")
	if s := <-fail; s.err == nil || !strings.Contains(s.err.Error(), "not found") || len(s.notices) < 2 {
		t.Errorf("a model the engine refuses: %+v", s)
	}
	if r := <-quiet; r.status != 200 || strings.Contains(r.body, "thinking") || !strings.Contains(r.body, `"done":true`) {
		t.Errorf("a request that does not stream: %d %s", r.status, r.body)
	}
	if rec.saw("for the GPU") {
		t.Error("a notice reached the engine")
	}
	h.waitIdle()
}

// OpenAI's chat completions, on llama.cpp (its own /chat/completions)
// and vLLM (/v1/), read by openai-go with its accumulator: notices in
// reasoning_content, then the engine's stream, the accumulator keeping
// the engine's id; a request whose "stream" comes after 64 KiB of
// messages gets them too; an engine's refusal is a last error chunk
// that the client returns; a request that does not stream gets none.
func TestWaitNoticeOpenAI(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"llamacpp", "vllm", "comfyui"}, settings: "wait_notice 200ms"})
	startImageJob(m.harness, m.sites["comfyui"])
	ctx := context.Background()
	long := strings.Repeat("a long conversation ", 4<<10) // 80 KiB: "stream" is past 64 KiB
	type run struct {
		s       streamed
		id, acc string
	}
	stream := func(base, model, content string, notices chan<- string, out chan<- run) {
		c := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey("unused"), option.WithHTTPClient(m.client), option.WithMaxRetries(0))
		st := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model,
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)}})
		var acc openai.ChatCompletionAccumulator
		var r run
		for st.Next() {
			ch := st.Current()
			acc.AddChunk(ch)
			var notice, text string
			if len(ch.Choices) > 0 {
				text = ch.Choices[0].Delta.Content
				if f, ok := ch.Choices[0].Delta.JSON.ExtraFields["reasoning_content"]; ok {
					notice = strings.Trim(f.Raw(), `"`)
				}
			}
			r.s.add(notice, text)
			if notice != "" {
				notices <- notice
			}
			if ch.ID != "" {
				r.id = ch.ID
			}
		}
		r.s.err = st.Err()
		if len(acc.Choices) > 0 {
			r.acc = acc.Choices[0].Message.Content
		}
		out <- r
	}
	llama, vllm, fail := make(chan run, 1), make(chan run, 1), make(chan run, 1)
	llamaN, vllmN, failN := make(chan string, 100), make(chan string, 100), make(chan string, 100)
	go stream(m.sites["llamacpp"]+"/", m.chatModel("llamacpp"), long, llamaN, llama)
	go stream(m.sites["vllm"]+"/v1/", m.chatModel("vllm"), "hi", vllmN, vllm)
	go stream(m.sites["llamacpp"]+"/", "no-such-model", "hi", failN, fail)
	quiet := m.postAsync(ctx, m.sites["vllm"]+"/v1/chat/completions", chatBody(m.chatModel("vllm"), false))
	for range 2 {
		recv(t, "llama.cpp notice", llamaN)
		recv(t, "vLLM notice", vllmN)
	}
	recv(t, "notice before the engine's error", failN)
	m.waitStatus("the quiet request waits", func(st Status) bool { return st.LLMWaiting == 4 })
	m.interruptRunning(m.sites["comfyui"])

	for what, ch := range map[string]chan run{"llama.cpp": llama, "vLLM": vllm} {
		r := <-ch
		r.s.check(t, what)
		if r.id == "" || r.acc != r.s.content {
			t.Errorf("%s: the accumulator has %q, the stream %q (id %q)", what, r.acc, r.s.content, r.id)
		}
	}
	if r := <-fail; r.s.err == nil || !strings.Contains(r.s.err.Error(), "not found") {
		t.Errorf("a model the engine refuses: %+v", r.s)
	}
	if r := <-quiet; r.status != 200 || strings.Contains(r.body, "for the GPU") || strings.Contains(r.body, "data:") {
		t.Errorf("a request that does not stream: %d %s", r.status, r.body)
	}
	m.waitIdle()
}

// wait_notice off in a handler's block overrides the global option: the
// request waits with nothing sent, as without it.
func TestWaitNoticeOffInHandler(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "wait_notice 200ms", edit: func(cf string) string {
		return strings.Replace(cf, "\n\tgpu_turnstile\n", "\n\tgpu_turnstile {\n\t\twait_notice off\n\t}\n", 1)
	}})
	startImageJob(h, h.image)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answer := make(chan result, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.llm+"/api/chat", strings.NewReader(chatBody("llama3.2", true)))
		answer <- h.send(req)
	}()
	h.waitStatus("the request waits", func(st Status) bool { return st.LLMWaiting == 1 })
	h.interruptRunning(h.image)
	if r := <-answer; r.err != nil || r.status != 200 || strings.Contains(r.body, "for the GPU") || !strings.Contains(r.body, `"done":true`) {
		t.Fatalf("%d %v %s", r.status, r.err, r.body)
	}
	h.waitIdle()
}

// llm_wait_timeout after the notices is the stream's last chunk, an
// error the client returns.
func TestWaitNoticeTimeout(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "wait_notice 200ms\n\t\tllm_wait_timeout 1s"})
	startImageJob(h, h.image)
	base, _ := url.Parse(h.llm)
	var s streamed
	s.err = ollamaapi.NewClient(base, h.client).Chat(context.Background(), &ollamaapi.ChatRequest{Model: "llama3.2"}, func(r ollamaapi.ChatResponse) error {
		s.add(r.Message.Thinking, r.Message.Content)
		return nil
	})
	if s.err == nil || !strings.Contains(s.err.Error(), "waited 1s for the GPU, busy with an image job") || len(s.notices) < 2 || s.content != "" {
		t.Fatalf("%+v (%v)", s, s.err)
	}
	h.interruptRunning(h.image)
	h.waitIdle()
}
