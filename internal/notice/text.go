package notice

import (
	"fmt"
	"time"
)

// State is what a notice tells of a request's wait: the one input of
// its text (Text).
type State struct {
	// Cause names what holds the GPU, as a busy answer names it ("an
	// image job", "an external hold").
	Cause string
	// Waited is how long the request has waited, since it arrived.
	Waited time.Duration
	// Admitted: the GPU is the request's now, its wait is over.
	Admitted bool
}

// Text is a notice's text. It is read in the chat's reasoning block,
// during the wait and long after it, so the last one says what was
// waited for and how long: "waited 12 s for the GPU: an image job".
func Text(s State) string {
	secs := int(s.Waited / time.Second)
	if s.Admitted {
		return fmt.Sprintf("waited %d s for the GPU: %s", secs, s.Cause)
	}
	return fmt.Sprintf("waiting for the GPU: %s %s (%d s so far)", s.Cause, holding(s.Cause), secs)
}

// holding is what the cause does to the GPU, in a notice.
func holding(cause string) string {
	if cause == "an external hold" {
		return "is in place"
	}
	return "is running"
}

// sameText reports whether a and b give the same notice but for the time
// waited: a change of the GPU that changes neither is not told.
func sameText(a, b State) bool {
	a.Waited, b.Waited = 0, 0
	return a == b
}
