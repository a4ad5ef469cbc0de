package llamaswaptest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
)

// Each test in this package pins one fact of section 2 of
// engines-api.md (llama-swap), checked against llama-swap's source; a
// fake kinder than llama-swap would make the turnstile's tests prove
// nothing.

const (
	qwen  = "qwen3-8b"
	gemma = "gemma-3-4b"
)

func newFake(t *testing.T, opts llamaswaptest.Options) (*llamaswaptest.Server, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := llamaswaptest.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	return srv, gpu
}

// answer is one HTTP exchange, read to its end.
type answer struct {
	status int
	body   string
	header http.Header
	err    error // from reading the body: a cut connection
}

// noRedirects is a client that shows redirects instead of following them.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

func send(t *testing.T, method, url, contentType, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), header: resp.Header, err: err}
}

// chat posts a chat completion for model and returns the answer.
func chat(t *testing.T, srv *llamaswaptest.Server, model string, stream bool) answer {
	t.Helper()
	s := "false"
	if stream {
		s = "true"
	}
	return send(t, http.MethodPost, srv.URL()+"/v1/chat/completions", "application/json",
		`{"model":"`+model+`","stream":`+s+`,"messages":[{"role":"user","content":"hi"}]}`)
}

// goChat runs chat in the background; the answer arrives on the channel.
func goChat(t *testing.T, srv *llamaswaptest.Server, model string, stream bool) <-chan answer {
	ch := make(chan answer, 1)
	go func() { ch <- chat(t, srv, model, stream) }()
	return ch
}

// waitEvent waits for the n-th (1-based) llamaswap event containing
// substr and returns its index on the timeline.
func waitEvent(t *testing.T, gpu *gputest.GPU, substr string, n int) int {
	t.Helper()
	at := -1
	ok := gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool {
		at = -1
		for i := 0; i < n; i++ {
			if at = gputest.Index(ev, at+1, "llamaswap", substr); at < 0 {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("no event %d %q:\n%s", n, substr, gputest.Dump(gpu.Events()))
	}
	return at
}

// index is the first llamaswap event containing substr, or -1.
func index(gpu *gputest.GPU, substr string) int {
	return gputest.Index(gpu.Events(), 0, "llamaswap", substr)
}

// envelope is llama-swap's JSON error body, byte for byte.
func envelope(msg, typ, code string) string {
	return `{"src":"llama-swap","error":{"message":"` + msg + `","type":"` + typ + `","param":null,"code":"` + code + `"}}`
}
