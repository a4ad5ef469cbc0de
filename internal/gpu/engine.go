package gpu

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// The orchestration drives the engines that share the GPU only through
// these interfaces; one adapter per engine (ollama.go, llamacpp.go,
// llamaswap.go, vllm.go, comfy.go, a1111.go) fits its client to them.
// Another engine is another adapter.

// Engine is what every engine has: a kind ("ollama", "comfyui"), a name
// unique in its turnstile (its kind unless the config names it), which
// the status, the metrics and the messages use, and a URL.
type Engine interface {
	Kind() string
	Name() string
	URL() string
}

// LLMEngine is an engine whose requests share the GPU.
type LLMEngine interface {
	Engine

	// Loaded lists the models loaded now. An error wrapping
	// ErrCannotEmpty says the engine can never be emptied as it runs
	// (a single-model llama-server, a vLLM without its sleep routes).
	Loaded(ctx context.Context) ([]string, error)

	// Empty unloads every model and confirms that the engine holds no
	// GPU memory. abnormal, if not zero, is when LLM use last ended
	// abnormally (a client gone mid-load, an upstream error): the engine's
	// own listing may then be no proof. It returns the models unloaded,
	// what contacting the engine gave (nil if it answered; it may be set
	// while err is nil, for an engine not running holds nothing), and an
	// error wrapping ErrNotEmptied if the engine was not emptied.
	Empty(ctx context.Context, log *zap.Logger, abnormal time.Time) (unloaded []string, contact, err error)

	// UnloadSoon asks the engine to unload its models without waiting
	// for it (early_unload) and returns how many it asked for.
	UnloadSoon(ctx context.Context) (int, error)

	// Warm loads model; an error wrapping ErrNoWarm says the engine
	// cannot.
	Warm(ctx context.Context, model string) error
}

// Waker is an LLMEngine that stays empty once emptied (vLLM asleep queues
// its requests and never wakes by itself): it is woken, and the wake
// confirmed, before LLM requests go again. Engines that load on demand are
// not Wakers.
type Waker interface {
	// Asleep reports whether the engine sleeps now.
	Asleep(ctx context.Context) (bool, error)
	// Wake wakes it and confirms it is awake.
	Wake(ctx context.Context) error
}

// ImageEngine is an engine whose jobs take the GPU alone.
type ImageEngine interface {
	Engine

	// Synchronous reports whether a job is the request itself (A1111:
	// the answer comes at the job's end), rather than queued and
	// followed to its end (ComfyUI's prompt_id).
	Synchronous() bool

	// Watch returns a watch over the engine's events (run it with Run),
	// which tells of queue changes as they happen; report is told when
	// its live connection comes or goes.
	Watch(clientID string, report func(connected bool, err error)) Watch

	// Queue counts the jobs running and pending.
	Queue(ctx context.Context) (running, pending int, err error)

	// WaitJob returns when the job has ended, with its outcome
	// (OutcomeLost if the engine no longer knows it), or when ctx ends.
	// w, if not nil, is a watch from Watch that wakes it early.
	WaitJob(ctx context.Context, id string, w Watch) (outcome string, err error)

	// WaitIdle returns when nothing is running or pending, or when ctx
	// ends.
	WaitIdle(ctx context.Context, w Watch) error

	// Interrupt stops the job at the engine's next chance.
	Interrupt(ctx context.Context, id string) error

	// Free frees the engine's memory and confirms it where the engine
	// can tell (confirmed false: sent but not verifiable). An error
	// wrapping ErrNoGPUReading says no confirmation will ever come.
	Free(ctx context.Context) (confirmed bool, err error)
}

// Preparer is an ImageEngine that needs a step before a job once it has
// been freed (A1111 does not move its checkpoint back to the GPU by
// itself).
type Preparer interface {
	Prepare(ctx context.Context) error
}

// RunningInterrupter is a synchronous ImageEngine whose interrupt names no
// job and is dropped when it comes before a job begins (A1111 clears the
// flag as a job begins): a cancel interrupts the job once it runs.
type RunningInterrupter interface {
	// InterruptRunning interrupts the API job the engine runs now, and
	// reports whether an interrupt is set on one (landed). While no job
	// runs it sends one all the same, which the next job's start drops;
	// while work from the engine's own UI runs, none.
	InterruptRunning(ctx context.Context) (landed bool, err error)
	// WasInterrupted reports, once a job's request has returned, whether
	// an interrupt stopped it (A1111 answers an interrupted job like a
	// finished one, with what it has made).
	WasInterrupted(ctx context.Context) (bool, error)
}

// Inheritor is an Engine whose adapter knows something of the engine that
// a config reload must not forget: the new adapter inherits it from the
// old one (vLLM: that it was put to sleep by the turnstile, and is to be
// woken, not emptied again, while an image engine may hold memory).
type Inheritor interface {
	Inherit(old Engine)
}

// Watch follows an image engine's events.
type Watch interface {
	Run(ctx context.Context)
	Changed() <-chan struct{}
	// QueueRemaining is the number of jobs queued, known once a live
	// connection reported it.
	QueueRemaining() (n int, known bool)
}

// OutcomeLost is the outcome of a job the engine no longer knows (it
// restarted).
const OutcomeLost = "lost"

var (
	// ErrNotEmptied is wrapped by the error of an LLM engine that could
	// not be emptied.
	ErrNotEmptied = errors.New("could not be emptied")

	// ErrCannotEmpty is wrapped by the error of an LLM engine that can
	// never be emptied as it runs; it matches ErrNotEmptied too.
	ErrCannotEmpty = mark(errors.New("cannot be emptied as it runs"), ErrNotEmptied)

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

// mark makes err match mark as well, keeping its message.
func mark(err, as error) error {
	if err == nil {
		return nil
	}
	return marked{mark: as, err: err}
}

// refusedAsEmpty turns an engine's refused connection into "holds
// nothing": no process answers on its port, so none of its models runs.
// Its children could outlive a killed server unseen (Ollama checks for its
// runners; the others cannot be seen from here): min_free_vram, if set,
// still checks the card. Any other error is returned as it is.
func refusedAsEmpty(log *zap.Logger, name string, err error) error {
	if err != nil && jsonhttp.Refused(err) {
		log.Warn(name+" refuses connections: counted as not running, so holding no GPU memory (min_free_vram checks the card, if set)", zap.Error(err))
		return nil
	}
	return err
}
