package turnstile

import (
	"encoding/json"
	"net/http"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// Bounds on the body that is scanned for the model it names: the body is
// already in memory for the wait, and a larger one (images in a chat) is
// not worth the scan for a label. A body read in chunks is joined for the
// scan, so its bound is lower.
const (
	modelScanLimit        = 1 << 20
	modelScanChunkedLimit = 64 << 10
)

// maxModelShown bounds the model name the status and a span show: a
// longer one is no model's name.
const maxModelShown = 256

// waiterOf is what the status shows of r while it waits for the GPU: its
// path and, for LLM work, the model it names (?model=, or the top-level
// "model" of a JSON body that was buffered whole for the wait). Nothing
// else of the body is kept.
func waiterOf(r *http.Request, t *waitTicket, llm bool) gpu.Waiter {
	w := gpu.Waiter{Path: r.URL.Path}
	if !llm {
		return w
	}
	w.Model = r.URL.Query().Get("model")
	if w.Model == "" && t != nil && t.body != nil {
		w.Model = bodyModel(t.body)
	}
	if len(w.Model) > maxModelShown {
		w.Model = ""
	}
	return w
}

// bodyModel returns the "model" a JSON body names at its top level, if the
// whole body is buffered and small enough; "" otherwise.
func bodyModel(wb *waitBody) string {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if !wb.complete || len(wb.chunks) == 0 {
		return ""
	}
	var size int
	for _, c := range wb.chunks {
		size += len(c)
	}
	if size > modelScanLimit || (len(wb.chunks) > 1 && size > modelScanChunkedLimit) {
		return ""
	}
	data := wb.chunks[0]
	if len(wb.chunks) > 1 {
		data = make([]byte, 0, size)
		for _, c := range wb.chunks {
			data = append(data, c...)
		}
	}
	// Unmarshal skips the fields it has no place for without keeping them.
	var v struct {
		Model string `json:"model"`
	}
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	return v.Model
}
