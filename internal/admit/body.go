package admit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// chunked bodies (no Content-Length) are read in chunks reserved one at a
// time, growing from firstChunk to maxChunk.
const (
	firstChunk = 1 << 10
	maxChunk   = 1 << 20
)

// readForWait reads up to lim.Body bytes of r's body into wb and puts wb
// in its place: the buffered bytes, then whatever was left unread. The
// bytes are reserved from the budget before they are read; if the budget
// runs out part-way, what was reserved is given back and an
// *OverloadError returned.
func (b *Budget) readForWait(wb *body, r *http.Request, lim Limits) error {
	wb.b, wb.src, wb.limit = b, r.Body, lim.Buffer
	wb.chunks = wb.first[:0]
	limit := min(lim.Body, lim.Buffer)
	var err error
	if r.ContentLength > 0 {
		err = wb.readKnown(r.ContentLength, limit)
	} else {
		err = wb.readChunked(limit)
	}
	if err != nil {
		wb.release()
		if errors.Is(err, errBudget) {
			return b.overload(lim, "wait_buffer_limit", len(wb.chunks) > 0)
		}
		return bodyReadError(err)
	}
	if wb.complete {
		r.Body.Close()
	}
	if len(wb.chunks) == 0 {
		wb.release() // nothing kept in memory
	}
	r.Body = wb
	return nil
}

// readBy is readForWait into t's own body, bounded by deadline: at the
// deadline the read is cut (cutter), what it reserved given back, and
// ErrLate returned. A request without a body leaves t.body nil.
func (b *Budget) readBy(t *Ticket, w http.ResponseWriter, r *http.Request, lim Limits, deadline time.Time) error {
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	wait := time.Until(deadline)
	if wait <= 0 {
		return ErrLate
	}
	read := false
	t.cut.w = w
	err := t.cut.read(wait, func() error {
		err := b.readForWait(&t.wb, r, lim)
		read = err == nil
		return err
	})
	switch {
	case err == nil:
		t.body = &t.wb
	case read:
		t.wb.release() // read in full, but too late
	}
	return err
}

// errBudget is a read that found the budget spent.
var errBudget = errors.New("wait_buffer_limit reached")

// readKnown reads a body whose size is known: one reservation, one
// allocation.
func (wb *body) readKnown(size, limit int64) error {
	n := min(size, limit)
	if !wb.reserve(n) {
		return errBudget
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(wb.src, buf); err != nil {
		return err // shorter than its Content-Length, or the client left
	}
	wb.chunks = append(wb.chunks, buf)
	if n < size {
		return nil // the rest waits unread
	}
	// One more read sees the end (Go's server has usually seen it with
	// the last bytes already): what lets it notice a client that leaves.
	switch m, err := wb.src.Read(wb.probe[:]); {
	case m > 0:
		return errors.New("body longer than its Content-Length")
	case err == io.EOF:
		wb.complete = true
	case err != nil:
		return err
	}
	return nil
}

// readChunked reads a body of unknown length a chunk at a time, each
// reserved before it is allocated, so that it never holds memory the
// budget did not grant. Chunks grow from firstChunk to maxChunk.
func (wb *body) readChunked(limit int64) error {
	size := int64(firstChunk)
	for total := int64(0); total < limit; size = min(size*2, maxChunk) {
		n := min(size, limit-total)
		if !wb.reserve(n) {
			return errBudget
		}
		buf := make([]byte, n)
		k, err := fill(wb.src, buf)
		if k > 0 {
			wb.chunks = append(wb.chunks, buf[:k])
		} else {
			wb.unreserve(n) // the body had ended: the chunk is dropped
		}
		total += int64(k)
		if err == io.EOF {
			wb.complete = true
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fill reads into buf until it is full or the reader fails; io.EOF means
// the body ended (unlike io.ReadFull, which also reports a reader's own
// io.ErrUnexpectedEOF, a truncated chunked body, as a short read).
func fill(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// bodyReadError is the answer to a body that could not be read: the 413 of
// Caddy's request_body max_size as it is, anything else a 400.
func bodyReadError(err error) error {
	var he caddyhttp.HandlerError
	if errors.As(err, &he) {
		return err
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return caddyhttp.Error(http.StatusRequestEntityTooLarge, err)
	}
	return caddyhttp.Error(http.StatusBadRequest, fmt.Errorf("gpu_turnstile: reading request body: %w", err))
}

// body is a request body read into memory before the request waits,
// followed by the rest of the original body if that was not read to its
// end. Its bytes are given back to the budget once they have been read
// (the upstream has them) or release is called, whichever comes first.
type body struct {
	b        *Budget
	src      io.ReadCloser // the original body
	limit    int64         // wait_buffer_limit
	complete bool          // src was read to its end
	probe    [1]byte       // what the read past the end reads into

	mu     sync.Mutex
	chunks [][]byte  // buffered bytes not yet read
	first  [1][]byte // chunks' room for a body read at once
	held   int64     // bytes reserved from the budget and not given back
}

func (wb *body) reserve(n int64) bool {
	if !wb.b.reserve(n, wb.limit) {
		return false
	}
	wb.mu.Lock()
	wb.held += n
	wb.mu.Unlock()
	return true
}

func (wb *body) unreserve(n int64) {
	wb.mu.Lock()
	wb.held -= n
	wb.mu.Unlock()
	wb.b.give(n, wb.limit)
}

// release gives the reserved bytes back; the buffered data stays readable.
func (wb *body) release() {
	wb.mu.Lock()
	wb.releaseLocked()
	wb.mu.Unlock()
}

func (wb *body) releaseLocked() {
	if wb.held > 0 {
		wb.b.give(wb.held, wb.limit)
		wb.held = 0
	}
}

// Read serves the buffered bytes, dropping each chunk once it is read,
// then the rest of the original body.
func (wb *body) Read(p []byte) (int, error) {
	wb.mu.Lock()
	for len(wb.chunks) > 0 {
		c := wb.chunks[0]
		n := copy(p, c)
		if n < len(c) {
			wb.chunks[0] = c[n:]
			wb.mu.Unlock()
			return n, nil
		}
		wb.chunks[0] = nil
		wb.chunks = wb.chunks[1:]
		if len(wb.chunks) == 0 {
			wb.releaseLocked()
		}
		if n > 0 || len(p) == 0 {
			wb.mu.Unlock()
			return n, nil
		}
	}
	wb.releaseLocked()
	wb.mu.Unlock()
	if wb.complete {
		return 0, io.EOF
	}
	return wb.src.Read(p) // never under the mutex: it may block on the client
}

// Close closes the original body.
func (wb *body) Close() error { return wb.src.Close() }
