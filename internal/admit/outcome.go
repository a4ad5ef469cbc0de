package admit

import "net/http"

// outcomeHead bounds what of an error answer's body Outcome keeps: an
// engine says it ran out of memory in its first words.
const outcomeHead = 1 << 10

// Outcome passes an answer through to the client and keeps what
// memory-aware admission learns from: its status and, for a server
// error, the start of its body.
type Outcome struct {
	http.ResponseWriter
	status int
	head   []byte
}

// WriteHeader implements http.ResponseWriter.
func (o *Outcome) WriteHeader(code int) {
	if o.status == 0 && code >= 200 {
		o.status = code
	}
	o.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (o *Outcome) Write(p []byte) (int, error) {
	if o.status == 0 {
		o.status = http.StatusOK
	}
	if o.status >= 500 && len(o.head) < outcomeHead {
		o.head = append(o.head, p[:min(len(p), outcomeHead-len(o.head))]...)
	}
	return o.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the writer beneath (flushes,
// deadlines).
func (o *Outcome) Unwrap() http.ResponseWriter { return o.ResponseWriter }

// Result is the answer's status (0 if none was written) and the start of
// a server error's body.
func (o *Outcome) Result() (status int, head []byte) { return o.status, o.head }
