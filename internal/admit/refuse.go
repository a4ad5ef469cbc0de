package admit

import (
	"io"
	"net/http"
	"strings"
	"time"
)

// discardLimit bounds how much of a refused request's body is read (and
// dropped) so that the client gets the busy answer.
const discardLimit = 64 << 20

// Drain readies the connection of a request Admit turned away with o for
// the busy answer; the dropped rest of the body is read by deadline.
//
// Many clients send the whole body before they read the answer; if the
// connection closed under them they would see a broken pipe, not the busy
// answer. So the rest is read and dropped (never kept), up to
// discardLimit; past that the connection is closed after the answer. A
// client that asked to be told first (Expect: 100-continue) and has not
// been sent on is answered without its body, on a connection that then
// closes (otherwise Go's server would try to read the body it never asked
// for, and the answer would wait for the client's expect timeout).
func (o *OverloadError) Drain(w http.ResponseWriter, r *http.Request, deadline time.Time) {
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") && !o.started {
		CloseAfter(w, r)
		return
	}
	if r.Body == nil {
		return
	}
	drain := func() error { _, err := io.CopyN(io.Discard, r.Body, discardLimit); return err }
	if Read(deadline, drain, Cutter(w)) == ErrLate {
		CloseAfter(w, r) // the rest is not read
	}
}
