package admit

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// ErrLate is returned by Read when the deadline passed before the read
// ended.
var ErrLate = errors.New("the wait deadline passed while the request body was read")

// Arrival is when Caddy began to serve r (its "start_time"), or now for
// a request Caddy's HTTP server did not start (the admin endpoint's).
func Arrival(r *http.Request) time.Time {
	if t, ok := caddyhttp.GetVar(r.Context(), "start_time").(time.Time); ok {
		return t
	}
	return time.Now()
}

// Read calls read and returns its error, or ErrLate if deadline comes
// first: then a timer calls cut, which makes the blocked read fail, and
// Read returns only once read has returned and cut has ended. If cut
// fails, Read waits for read to end of itself (the server's own timeouts
// bound it) and still returns ErrLate. A deadline already past returns
// ErrLate without reading. read runs on the caller's goroutine: a body
// that is already there costs a timer, not a goroutine.
func Read(deadline time.Time, read func() error, cut func() error) error {
	wait := time.Until(deadline)
	if wait <= 0 {
		return ErrLate
	}
	c := &cutter{cut: cut}
	return c.read(wait, read)
}

// cutter cuts a read at its deadline: through cut, or if that is nil a
// read deadline of now on w's connection (Cutter).
type cutter struct {
	cut   func() error
	w     http.ResponseWriter
	fired sync.WaitGroup // cut's run, once the timer has fired
}

// read calls read with a timer that calls c.fire after wait.
func (c *cutter) read(wait time.Duration, read func() error) error {
	c.fired.Add(1)
	t := time.AfterFunc(wait, c.fire)
	err := read()
	if t.Stop() {
		c.fired.Done() // fire will not run: the cutter is as new
		return err     // nothing was cut
	}
	c.fired.Wait()
	return ErrLate
}

func (c *cutter) fire() {
	defer c.fired.Done()
	if c.cut != nil {
		c.cut() // if it cannot be cut, the read still ends, only later
		return
	}
	cutConn(c.w)
}

// Cutter returns the cut for Read of a request answered through w: a
// read deadline of now on its connection (HTTP/1) or stream (HTTP/2 and
// 3), which fails a body read in flight and every later one. Caddy keeps
// a deadline set by a handler as the ceiling of its own idle deadlines,
// and keeps it expired past the handler, so Go's server does not wait
// for the body's rest after the answer either.
func Cutter(w http.ResponseWriter) func() error {
	return func() error { return cutConn(w) }
}

func cutConn(w http.ResponseWriter) error {
	return http.NewResponseController(w).SetReadDeadline(time.Now())
}

// CloseAfter asks, on HTTP/1, that the connection be closed after the
// answer: the rest of the body, if any, is then never read (HTTP/2 and 3
// end the stream alone).
func CloseAfter(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
}
