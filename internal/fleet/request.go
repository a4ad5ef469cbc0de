package fleet

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// DefaultBodyLimit is how much of a request's body Read keeps in memory
// unless told otherwise: chats and workflows fit, and a retried request
// is replayed from the same amount (reverse_proxy's request_buffers).
const DefaultBodyLimit = 4 << 20

// PinCookie is the cookie that keeps a browser on the host it was sent
// to (its value is that host's Follower.Pin).
const PinCookie = "gpu_turnstile_host"

// Request is what the selection policy knows of a request: what Read
// found in it, and the hosts already tried for it (a retry goes
// elsewhere). Pick reads it; only the policy's Select, one call at a time
// per request, writes Tried.
type Request struct {
	Class    route.Class // LLM, Image or Passthrough
	Model    string      // the model an LLM request names, "" if unknown
	Workflow string      // an image job's workflow signature, "" if unknown
	Client   string      // the client_id of the body or query, "" if none
	Pin      string      // the PinCookie's value, "" if none
	// Whole is false when the body was larger than the limit: the class
	// is the route's, the model and workflow are unknown.
	Whole bool
	// Tried has bit i set once the upstream at index i of the pool was
	// picked for this request (up to 64 upstreams).
	Tried uint64

	on *Follower // the host of the try under way, for an LLM request's model
}

// SentTo records that q's next try goes to f's host (nil: a host not
// followed). The try before it, if any, ended refused: a request is tried
// again only after its host refused it or could not be reached.
func (q *Request) SentTo(f *Follower, now time.Time) {
	if q.Class != route.LLM || q.Model == "" {
		return
	}
	if q.on != nil {
		q.on.sent.end(q.Model, now, false)
	}
	if q.on = f; f != nil {
		f.sent.begin(q.Model)
	}
}

// Done records that q has ended, served by the host of its last try.
func (q *Request) Done() {
	if q.on != nil {
		q.on.sent.end(q.Model, time.Now(), true)
		q.on = nil
	}
}

// Read classifies r by its route, as gpu_turnstile does in auto mode, and
// reads up to limit bytes of its body for the model, workflow and client
// it names. r.Body is replaced by a reader of the same bytes (what was
// read, then the rest): the body goes on whole, and Content-Length is
// left as it was. A body over limit is not read further.
func Read(r *http.Request, limit int64) (*Request, error) {
	q := &Request{Class: kinds.Routes.Classify(r), Whole: true}
	q.Client = queryClient(r.URL.RawQuery)
	if c, err := r.Cookie(PinCookie); err == nil {
		q.Pin = c.Value
	}
	if r.Body == nil || r.Body == http.NoBody || (q.Class == route.Passthrough && r.Method != http.MethodPost) {
		return q, nil
	}
	body, whole, err := readBounded(r, limit)
	if err != nil {
		return q, err
	}
	q.Whole = whole
	if !whole {
		return q, nil
	}
	switch q.Class {
	case route.LLM:
		if q.Model = queryModel(r.URL.RawQuery); q.Model == "" {
			q.Model = Model(body)
		}
	case route.Image:
		p := route.CleanPath(r)
		q.Workflow = kinds.Signature(kinds.Routes.ImageKind(p), p, body)
		if c := bodyClient(body); c != "" {
			q.Client = c
		}
	}
	return q, nil
}

// readBounded reads r's body up to limit bytes and puts back a reader of
// the whole body; whole is false when there was more. A body of known
// length is read into one buffer of its size.
func readBounded(r *http.Request, limit int64) (_ []byte, whole bool, _ error) {
	size := limit + 1
	if r.ContentLength >= 0 && r.ContentLength < size {
		size = r.ContentLength + 1
	}
	buf := make([]byte, 0, min(size, 32<<10))
	var err error
	for int64(len(buf)) < limit+1 {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(int64(cap(buf)), limit+1-int64(len(buf)))))
		}
		var n int
		n, err = r.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			break
		}
	}
	if err == io.EOF {
		err = nil
	}
	whole = err == nil && int64(len(buf)) <= limit
	p := &replay{rest: r.Body, more: !whole}
	p.buf.Reset(buf)
	r.Body = p
	if !whole {
		return nil, false, err
	}
	return buf, true, nil
}

// replay is a body read ahead: what was read, then (when it was not the
// whole) the rest of the original, which it closes.
type replay struct {
	buf  bytes.Reader
	rest io.ReadCloser
	more bool
}

func (p *replay) Read(b []byte) (int, error) {
	n, err := p.buf.Read(b)
	if err == io.EOF && p.more {
		return p.rest.Read(b)
	}
	return n, err
}

func (p *replay) Close() error { return p.rest.Close() }

// queryModel is the model a query names, "" if none; the common
// query-less request costs nothing.
func queryModel(raw string) string {
	if !strings.Contains(raw, "model=") {
		return ""
	}
	return parseQuery(raw).Get("model")
}

// queryClient is the client_id (or ComfyUI websocket's clientId) a query
// names, "" if none; the common query-less request costs nothing.
func queryClient(raw string) string {
	if raw == "" || !(bytes.Contains([]byte(raw), []byte("client_id=")) || bytes.Contains([]byte(raw), []byte("clientId="))) {
		return ""
	}
	v := parseQuery(raw)
	if c := v.Get("client_id"); c != "" {
		return c
	}
	return v.Get("clientId")
}
