package engine

import (
	"errors"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// OutcomeLost is the outcome of a job the engine no longer knows (it
// restarted).
const OutcomeLost = "lost"

var (
	// ErrNotEmptied is wrapped by the error of an LLM engine that could
	// not be emptied.
	ErrNotEmptied = errors.New("could not be emptied")

	// ErrCannotEmpty is wrapped by the error of an LLM engine that can
	// never be emptied as it runs; it matches ErrNotEmptied too.
	ErrCannotEmpty = Mark(errors.New("cannot be emptied as it runs"), ErrNotEmptied)

	// ErrNoWarm is wrapped by the error of an engine that cannot warm a
	// model.
	ErrNoWarm = errors.New("cannot warm a model")

	// ErrNoGPUReading is wrapped by the error of an engine or probe that
	// reports no GPU memory, so its frees cannot be confirmed.
	ErrNoGPUReading = errors.New("no GPU memory reading")
)

// marked is err, also matching mark in errors.Is, with err's message.
type marked struct{ mark, err error }

func (e marked) Error() string   { return e.err.Error() }
func (e marked) Unwrap() []error { return []error{e.mark, e.err} }

// Mark makes err match as as well, keeping its message.
func Mark(err, as error) error {
	if err == nil {
		return nil
	}
	return marked{mark: as, err: err}
}

// RefusedAsEmpty turns an engine's refused connection into "its API
// confirms nothing more": the engine is not running, so it lists and
// unloads nothing. Its model servers may outlive it all the same (a
// killed llama-swap leaves them running), so the orchestration counts it
// emptied only once the processes remembered serving its models are gone
// (package served), the caller returning the refusal as the contact. Any
// other error is returned as it is.
func RefusedAsEmpty(err error) error {
	if err != nil && jsonhttp.Refused(err) {
		return nil
	}
	return err
}
