package httpapi

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestEventStreamKeepsAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := testTurnstile("keepalive")
		defer ts.orch().Close()
		done := make(chan struct{})
		s := &StatusRoutes{Turnstile: ts, Done: done}
		pr, pw := io.Pipe()
		w := &pipeWriter{header: http.Header{}, w: pw}
		served := make(chan error, 1)
		req, _ := http.NewRequest(http.MethodGet, "/status?view=events", nil)
		go func() { served <- s.ServeHTTP(w, req); pw.Close() }()
		lines := bufio.NewScanner(pr)
		readUntil := func(prefix string) time.Duration {
			start := time.Now()
			for lines.Scan() {
				if strings.HasPrefix(lines.Text(), prefix) {
					return time.Since(start)
				}
			}
			t.Fatalf("stream ended before %q", prefix)
			return 0
		}
		readUntil("event: status")
		for range 3 {
			if took := readUntil(": keep-alive"); took > 15*time.Second {
				t.Fatalf("keep-alive after %v", took)
			}
		}
		close(done)
		go io.Copy(io.Discard, pr)
		if err := <-served; err != nil {
			t.Fatal(err)
		}
	})
}

// pipeWriter is a flushable ResponseWriter that writes into a pipe.
type pipeWriter struct {
	header http.Header
	w      io.Writer
}

func (p *pipeWriter) Header() http.Header         { return p.header }
func (p *pipeWriter) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeWriter) WriteHeader(int)             {}
func (p *pipeWriter) Flush()                      {}
