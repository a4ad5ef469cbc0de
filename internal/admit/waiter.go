package admit

import (
	"bytes"
	"net/http"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/jsonscan"
)

// modelScanLimit bounds what of a body is scanned for the model it names:
// clients name it first or early, and a body with images in it is not
// worth a full scan for a label.
const modelScanLimit = 64 << 10

// maxModelShown bounds the model name the status and a span show: a
// longer one is no model's name.
const maxModelShown = 256

// Waiter is what the status shows of r while it waits for the GPU: its
// path and, for LLM work, the model it names (?model=, or the top-level
// "model" within the first 64 KiB of a JSON body, which is already in
// memory for the wait); for an image job, the hash of the client_id its
// body names (ClientHash). Nothing else of the body is kept. A nil ticket
// has no body.
func (t *Ticket) Waiter(r *http.Request, llm bool) gpu.Waiter {
	w := gpu.Waiter{Path: r.URL.Path}
	if !llm {
		w.Client = ClientHash(bodyClient(t.Head(ImageBodyLimit)))
		return w
	}
	if r.URL.RawQuery != "" { // parsing even an empty query allocates
		w.Model = r.URL.Query().Get("model")
	}
	if w.Model == "" && t != nil && t.body != nil {
		w.Model = bodyModel(t.body)
	}
	if len(w.Model) > maxModelShown {
		w.Model = ""
	}
	return w
}

// bodyModel returns the "model" a JSON body names at its top level within
// its first modelScanLimit bytes; "" otherwise, or if it is longer than a
// model's name. It reads the top level only up to that member, skipping
// the values before it, and copies nothing but the name.
func bodyModel(wb *body) string {
	raw, ok := jsonscan.Member(wb.head(modelScanLimit), "model")
	if !ok {
		return ""
	}
	if m, ok := jsonscan.Unquote(raw); ok && len(m) <= maxModelShown {
		return models.name(m)
	}
	return ""
}

// head returns the body's first limit bytes as read, or all of it if
// shorter; it is not to be written to.
func (wb *body) head(limit int) []byte {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if len(wb.chunks) == 1 || (len(wb.chunks) > 1 && len(wb.chunks[0]) >= limit) {
		c := wb.chunks[0]
		return c[:min(len(c), limit)] // no copy: the chunk is never written to
	}
	var head []byte
	for _, c := range wb.chunks {
		head = append(head, c[:min(len(c), limit-len(head))]...)
	}
	return head
}

// Head returns the first limit bytes of the request's body as read for
// its wait (nil if none was), for reading what the body asks for (an
// image job's workflow). It is not to be written to.
func (t *Ticket) Head(limit int) []byte {
	if t == nil || t.body == nil {
		return nil
	}
	return t.body.head(limit)
}

// Whole returns the request's whole body as read for its wait, in one
// slice, for reading what the body asks for at any place in it (whether
// it streams, which clients may write last); nil if none was read, or if
// the body was not read to its end (the rest waits unread, past what the
// wait may buffer). A body read at once (one with a Content-Length) is
// not copied; one read in chunks is joined into a copy, which lives only
// as long as its reading. It is not to be written to, and is read before
// the body is forwarded.
func (t *Ticket) Whole() []byte {
	if t == nil || t.body == nil {
		return nil
	}
	return t.body.whole()
}

func (wb *body) whole() []byte {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if !wb.complete || len(wb.chunks) == 0 {
		return nil
	}
	if len(wb.chunks) == 1 {
		return wb.chunks[0]
	}
	return bytes.Join(wb.chunks, nil)
}
