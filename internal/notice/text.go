package notice

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/words"
)

// memoryPrefix marks a cause that is a lack of video memory (ForMemory),
// which a notice words as such.
const memoryPrefix = "memory: "

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
	// Position is the request's place in line (0: not known), and
	// Expected, if Known, how long until it is predicted to start.
	Position int
	Expected time.Duration
	Known    bool
}

// Text is a notice's text. It is read in the chat's reasoning block,
// during the wait and long after it, so the last one says what was
// waited for and how long: "waited 12 s for the GPU: an image job".
func Text(s State) string {
	secs := int(s.Waited / time.Second)
	if lack, ok := strings.CutPrefix(s.Cause, memoryPrefix); ok {
		if s.Admitted {
			return fmt.Sprintf("waited %d s for video memory", secs)
		}
		return fmt.Sprintf("waiting for video memory: %s (%d s so far)", lack, secs)
	}
	if s.Admitted {
		return fmt.Sprintf("waited %d s for the GPU: %s", secs, s.Cause)
	}
	return fmt.Sprintf("waiting for the GPU: %s %s (%d s so far%s)", s.Cause, holding(s.Cause), secs, outlook(s))
}

// outlook is the place in line and the expected start, as a notice adds
// them: "; 2nd in line, expected to start in about 40 s".
func outlook(s State) string {
	if s.Position == 0 {
		return ""
	}
	out := fmt.Sprintf("; %s in line", words.Ordinal(s.Position))
	if s.Known {
		out += ", expected to start in " + words.About(s.Expected)
	}
	return out
}

// holding is what the cause does to the GPU, in a notice.
func holding(cause string) string {
	if cause == "an external hold" {
		return "is in place"
	}
	return "is running"
}

// sameText reports whether a and b give the same notice but for the time
// waited and the expected start (which the next timed notice updates): a
// change of the GPU that changes neither is not told at once.
func sameText(a, b State) bool {
	return a.Cause == b.Cause && a.Admitted == b.Admitted && a.Position == b.Position
}
