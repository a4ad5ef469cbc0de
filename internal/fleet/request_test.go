package fleet

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// chat is a chat body of about n bytes whose model comes last.
func chat(n int) string {
	return `{"messages":[{"role":"user","content":"` + strings.Repeat("a", n) + `"}],"model":"qwen3:8b"}`
}

func TestReadKeepsTheBodyWhole(t *testing.T) {
	for _, c := range []struct {
		name   string
		body   string
		length int64 // -1: unknown (chunked)
		limit  int64
		whole  bool
	}{
		{"small, length known", chat(10), 0, DefaultBodyLimit, true},
		{"large, length unknown", chat(100 << 10), -1, DefaultBodyLimit, true},
		{"exactly the limit", chat(100), 0, int64(len(chat(100))), true},
		{"over the limit, length known", chat(100), 0, 64, false},
		{"over the limit, length unknown", chat(100 << 10), -1, 40 << 10, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/api/chat", strings.NewReader(c.body))
			r.ContentLength = int64(len(c.body))
			if c.length < 0 {
				r.ContentLength = -1
			}
			q, err := Read(r, c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if q.Class != route.LLM || q.Whole != c.whole {
				t.Errorf("class %v, whole %v; want llm, %v", q.Class, q.Whole, c.whole)
			}
			if want := map[bool]string{true: "qwen3:8b", false: ""}[c.whole]; q.Model != want {
				t.Errorf("model %q, want %q", q.Model, want)
			}
			got, err := io.ReadAll(r.Body)
			if err != nil || string(got) != c.body {
				t.Errorf("the body goes on as %d bytes (%v), want its %d", len(got), err, len(c.body))
			}
		})
	}
}

// failing is a body whose read fails after its first bytes.
type failing struct{ r io.Reader }

func (f *failing) Read(b []byte) (int, error) {
	n, err := f.r.Read(b)
	if err == io.EOF {
		return n, errors.New("connection reset")
	}
	return n, err
}

func TestReadFailedBody(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/api/chat", nil)
	r.Body = io.NopCloser(&failing{bytes.NewReader([]byte(chat(10)))})
	r.ContentLength = -1
	if _, err := Read(r, DefaultBodyLimit); err == nil {
		t.Error("a body whose read failed is classified")
	}
}

func TestReadModelFromTheQuery(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/api/chat?model=llama3.2", strings.NewReader(chat(10)))
	if q, _ := Read(r, DefaultBodyLimit); q.Model != "llama3.2" {
		t.Errorf("model %q, want the query's", q.Model)
	}
}
