package admit

import (
	"net/http/httptest"
	"strings"
	"testing"
)

func TestWaiterModel(t *testing.T) {
	cases := []struct {
		name     string
		chunks   []string
		complete bool
		want     string
	}{
		{"first", []string{`{"model":"llama3.2","messages":[]}`}, true, "llama3.2"},
		{"after the messages", []string{`{"messages":[{"role":"user","content":"hi","model":"x"}],"model":"qwen3:8b"}`}, true, "qwen3:8b"},
		{"across chunks", []string{`{"stream":false,"mo`, `del":"llama3.2"}`}, true, "llama3.2"},
		{"none", []string{`{"prompt":"hi"}`}, true, ""},
		{"not a string", []string{`{"model":7}`}, true, ""},
		{"not an object", []string{`["model","x"]`}, true, ""},
		{"not JSON", []string{`model=llama3.2`}, true, ""},
		{"named before the body is cut", []string{`{"model":"llama3.2","prompt":"a long pro`}, false, "llama3.2"},
		{"cut before it", []string{`{"prompt":"a long pro`}, false, ""},
		{"too long", []string{`{"model":"` + strings.Repeat("m", maxModelShown+1) + `"}`}, true, ""},
		{"past the scanned part", []string{`{"prompt":"` + strings.Repeat("p", modelScanLimit) + `","model":"llama3.2"}`}, true, ""},
		{"past the scanned part, in chunks", []string{`{"prompt":"`, strings.Repeat("p", modelScanLimit), `","model":"llama3.2"}`}, true, ""},
		{"after a large value within it", []string{`{"messages":[{"content":"` + strings.Repeat("p", modelScanLimit/2) + `"}],"model":"qwen3:8b"}`}, true, "qwen3:8b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wb := &body{complete: tc.complete}
			for _, c := range tc.chunks {
				wb.chunks = append(wb.chunks, []byte(c))
			}
			r := httptest.NewRequest("POST", "/api/chat", nil)
			w := (&Ticket{body: wb}).Waiter(r, true)
			if w.Model != tc.want || w.Path != "/api/chat" {
				t.Errorf("waiter %+v, want model %q", w, tc.want)
			}
		})
	}
	r := httptest.NewRequest("GET", "/props?model=qwen3:8b", nil)
	if w := (*Ticket)(nil).Waiter(r, true); w.Model != "qwen3:8b" || w.Path != "/props" {
		t.Errorf("waiter of a GET with ?model=: %+v", w)
	}
	r = httptest.NewRequest("POST", "/prompt", nil)
	if w := (&Ticket{body: &body{complete: true, chunks: [][]byte{[]byte(`{"model":"x"}`)}}}).Waiter(r, false); w.Model != "" {
		t.Errorf("an image request's waiter names a model: %+v", w)
	}
}

// BenchmarkWaiterModel is the model read from a typical chat body (about
// 1.5 KiB, "model" first) as vram_admission reads it for every request
// that waits: the one allocation is the name's copy.
func BenchmarkWaiterModel(b *testing.B) {
	content := strings.Repeat("The sky looks blue because air molecules scatter short wavelengths more than long ones. ", 12)
	chat := `{"model":"llama3.2","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` +
		content + `"}],"stream":true,"options":{"temperature":0.7,"num_ctx":8192}}`
	t := &Ticket{body: &body{complete: true, chunks: [][]byte{[]byte(chat)}}}
	r := httptest.NewRequest("POST", "/api/chat", nil)
	b.ReportAllocs()
	for b.Loop() {
		if t.Waiter(r, true).Model != "llama3.2" {
			b.Fatal("no model")
		}
	}
}
