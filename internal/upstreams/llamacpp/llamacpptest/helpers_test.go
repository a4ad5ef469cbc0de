package llamacpptest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

// Each test here pins a fact of engines-api.md section 1 (or of the
// llama.cpp source it was read from, where the test says so); a fake
// kinder than llama-server would make the turnstile's tests prove nothing.

const (
	qwen  = "qwen3-8b"
	gemma = "gemma-3-4b"
)

func newFake(t *testing.T, opts llamacpptest.Options) (*llamacpptest.Server, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := llamacpptest.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	return srv, gpu
}

// answer is one HTTP exchange's outcome.
type answer struct {
	status int
	body   string
	header http.Header
}

func do(t *testing.T, method, url, body string) answer {
	t.Helper()
	a, err := tryDo(context.Background(), method, url, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return a
}

func tryDo(ctx context.Context, method, url, body string) (answer, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header}, err
}

func post(t *testing.T, srv *llamacpptest.Server, path, body string) answer {
	t.Helper()
	return do(t, http.MethodPost, srv.URL()+path, body)
}

func get(t *testing.T, srv *llamacpptest.Server, path string) answer {
	t.Helper()
	return do(t, http.MethodGet, srv.URL()+path, "")
}

func chat(model string, stream bool) string {
	b, _ := json.Marshal(map[string]any{"model": model, "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": "hi"}}})
	return string(b)
}

func modelBody(model string) string { return `{"model":"` + model + `"}` }

// envelope is llama.cpp's error body, in its key order.
func envelope(code int, message, typ string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": message, "type": typ}})
	return string(b) // encoding/json sorts keys: code, message, type, as llama.cpp orders them
}

func wantAnswer(t *testing.T, what string, got answer, status int, body string) {
	t.Helper()
	if got.status != status || got.body != body {
		t.Fatalf("%s: %d %s\nwant %d %s", what, got.status, got.body, status, body)
	}
}

func waitEvent(t *testing.T, gpu *gputest.GPU, substr string) {
	t.Helper()
	if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "llamacpp", substr) >= 0 }) {
		t.Fatalf("no %q event:\n%s", substr, gputest.Dump(gpu.Events()))
	}
}

// waitStatus waits for a model's status. Every status change of the fake
// is an event on the GPU's timeline (an occupancy or a mark).
func waitStatus(t *testing.T, srv *llamacpptest.Server, gpu *gputest.GPU, model, status string) {
	t.Helper()
	if !gpu.WaitFor(10*time.Second, func([]gputest.Event) bool { return srv.Status(model) == status }) {
		t.Fatalf("%s is %q, want %q:\n%s", model, srv.Status(model), status, gputest.Dump(gpu.Events()))
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

// entry is what the tests read of a GET /models entry.
type entry struct {
	ID     string `json:"id"`
	Status struct {
		Value    string   `json:"value"`
		Args     []string `json:"args"`
		Failed   *bool    `json:"failed"`
		ExitCode *int     `json:"exit_code"`
		Preset   *string  `json:"preset"`
	} `json:"status"`
	Source string `json:"source"`
}

func listModels(t *testing.T, srv *llamacpptest.Server) map[string]entry {
	t.Helper()
	a := get(t, srv, "/models")
	var out struct{ Data []entry }
	if err := json.Unmarshal([]byte(a.body), &out); a.status != 200 || err != nil {
		t.Fatalf("GET /models: %d %s %v", a.status, a.body, err)
	}
	m := map[string]entry{}
	for _, e := range out.Data {
		m[e.ID] = e
	}
	return m
}
