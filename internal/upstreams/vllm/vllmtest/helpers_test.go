package vllmtest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// Each test in this package pins one fact of section 3 of engines-api.md
// (vLLM's sleep mode); a fake kinder than vLLM would make the turnstile's
// tests prove nothing.

const model = "Qwen/Qwen3-8B"

func newFake(t *testing.T, opts vllmtest.Options) (*vllmtest.Server, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := vllmtest.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	return srv, gpu
}

// answer is one HTTP exchange, read to its end.
type answer struct {
	status int
	body   string
	header http.Header
}

func send(t *testing.T, method, url, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{status: -1, body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), header: resp.Header}
}

// goChat posts a chat completion in the background.
func goChat(t *testing.T, srv *vllmtest.Server, stream bool) <-chan answer {
	ch := make(chan answer, 1)
	s := "false"
	if stream {
		s = "true"
	}
	go func() {
		ch <- send(t, http.MethodPost, srv.URL()+"/v1/chat/completions",
			`{"model":"`+model+`","stream":`+s+`,"messages":[{"role":"user","content":"hi"}]}`)
	}()
	return ch
}

func goSend(t *testing.T, method, url string) <-chan answer {
	ch := make(chan answer, 1)
	go func() { ch <- send(t, method, url, "") }()
	return ch
}

// waitEvent waits for the first vllm event containing substr from index
// from on, and returns its index.
func waitEvent(t *testing.T, gpu *gputest.GPU, from int, substr string) int {
	t.Helper()
	at := -1
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool {
		at = gputest.Index(ev, from, "vllm", substr)
		return at >= 0
	}) {
		t.Fatalf("no event %q after %d:\n%s", substr, from, gputest.Dump(gpu.Events()))
	}
	return at
}

// never reports whether no vllm event containing substr shows up within
// window: for facts that are about something not happening.
func never(gpu *gputest.GPU, substr string, window time.Duration) bool {
	return !gpu.WaitFor(window, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "vllm", substr) >= 0 })
}
