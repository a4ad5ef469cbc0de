package engine

import (
	"errors"

	"bytes"
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// registered are the kinds the program knows (engine/kinds registers
// them as it initialises), for what is asked of every kind at once: a
// model's canonical name, an answer's out-of-memory text.
var registered []*Kind

// Register adds kinds to those ModelKey and OutOfMemory consult; it is
// called once, by the registry's initialisation.
func Register(kinds ...*Kind) { registered = append(registered, kinds...) }

// ModelKey is the name a model is known by whichever engine names it:
// trimmed, then made canonical by each kind that has a rule for it.
func ModelKey(name string) string {
	name = strings.TrimSpace(name)
	for _, k := range registered {
		if k.ModelKey != nil {
			name = k.ModelKey(name)
		}
	}
	return name
}

// OutOfMemory reports whether the start of an engine's answer says a
// model did not fit in memory, in any kind's words.
func OutOfMemory(head []byte) bool {
	lower := bytes.ToLower(head)
	for _, k := range registered {
		for _, t := range k.OOM {
			if bytes.Contains(lower, []byte(t)) {
				return true
			}
		}
	}
	return false
}

// Refused reports whether err is a refused connection: no process
// answers on the engine's port.
func Refused(err error) bool { return jsonhttp.Refused(err) }

// Unreached reports whether err is a call to the engine that got no
// answer at all (refused, reset, timed out before an answer). An error
// that came with an answer, such as a confirmation that never came
// (the engine said its model still runs), is no failed contact.
func Unreached(err error) bool { return jsonhttp.Unreached(err) }

// Answered reports whether err came with the engine's answer (a status
// other than 2xx): the engine was reached.
func Answered(err error) bool {
	var se *jsonhttp.StatusError
	return errors.As(err, &se)
}
