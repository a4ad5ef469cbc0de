package fleet

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkRead is what gpu_turnstile_classify costs a typical chat:
// its route classified, its body read whole (and put back) and the
// model found.
func BenchmarkRead(b *testing.B) {
	body := []byte(`{"model":"llama3.2","messages":[{"role":"user","content":"Why is the sky blue? Answer in one paragraph."}],"stream":true}`)
	r := httptest.NewRequest(http.MethodPost, "/api/chat", nil)
	r.ContentLength = int64(len(body))
	rd := bytes.NewReader(body)
	src := io.NopCloser(rd)
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(body)
		r.Body = src
		q, err := Read(r, DefaultBodyLimit)
		if err != nil || q.Model != "llama3.2" {
			b.Fatal(q, err)
		}
	}
}
