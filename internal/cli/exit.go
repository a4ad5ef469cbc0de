package cli

import "net/http"

// Exit codes. A command that runs a program (hold -- COMMAND) exits with
// the program's own status once the program has run.
const (
	// ExitOK: done (held, renewed, released, cancelled, shown).
	ExitOK = 0
	// ExitError: anything else: a usage error, the admin endpoint
	// unreachable, an answer that is not understood, a server error.
	ExitError = 1
	// ExitBlocked: the GPU could not be held at once (hold --no-wait),
	// or the request conflicts with the turnstile's state (a presence
	// hold cannot be released by hand; a cancel is already under way).
	ExitBlocked = 3
	// ExitTimedOut: the GPU did not come free within --wait-timeout,
	// could not be emptied, or the turnstile was still starting; nothing
	// was held.
	ExitTimedOut = 4
	// ExitNotFound: no such hold (it may have expired), no image job
	// running to cancel, or no such turnstile.
	ExitNotFound = 5
)

// ExitCodes is the documented table, in order.
var ExitCodes = []struct {
	Code    int
	Meaning string
}{
	{ExitOK, "done: held, renewed, released, cancelled or shown"},
	{ExitError, "error: usage, admin endpoint unreachable, unexpected answer"},
	{ExitBlocked, "blocked: the GPU could not be held at once (--no-wait), or a conflict"},
	{ExitTimedOut, "not held in time: the GPU did not come free within --wait-timeout, or could not be emptied"},
	{ExitNotFound, "not found: no such hold, no job running, no such turnstile"},
}

// exitFor maps an admin endpoint's HTTP status to an exit code.
func exitFor(status int) int {
	switch status {
	case http.StatusConflict:
		return ExitBlocked
	case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return ExitTimedOut
	case http.StatusNotFound:
		return ExitNotFound
	}
	return ExitError
}
