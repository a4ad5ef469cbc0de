// Package engine holds what the orchestration needs of the engines that
// share a GPU: the interfaces each adapter (one package per kind under
// engine/) fits its client to, and the errors they report. Another engine
// is another adapter.
package engine

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// Engine is what every engine has: a kind (its Kind's Name), a name
// unique in its turnstile (its kind unless the config names it), which
// the status, the metrics and the messages use, and a URL.
type Engine interface {
	Kind() string
	Name() string
	URL() string
}

// LLM is an engine whose requests share the GPU.
type LLM interface {
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

// Keeper is an LLM engine that can be emptied of all but some of its
// models: co_resident models that fit beside the next image job stay
// loaded through it.
type Keeper interface {
	// EmptyBut is Empty after normal LLM use, but leaves loaded the
	// models keep reports true for; what else it holds is unloaded and
	// confirmed gone. kept are the models it left loaded.
	EmptyBut(ctx context.Context, log *zap.Logger, keep func(model string) bool) (unloaded, kept []string, contact, err error)
}

// Waker is an LLM engine that stays empty once emptied (vLLM asleep queues
// its requests and never wakes by itself): it is woken, and the wake
// confirmed, before LLM requests go again. Engines that load on demand are
// not Wakers.
type Waker interface {
	// Asleep reports whether the engine sleeps now.
	Asleep(ctx context.Context) (bool, error)
	// Wake wakes it and confirms it is awake.
	Wake(ctx context.Context) error
}

// Image is an engine whose jobs take the GPU alone.
type Image interface {
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

// Preparer is an Image engine that needs a step before a job once it has
// been freed (A1111 does not move its checkpoint back to the GPU by
// itself).
type Preparer interface {
	Prepare(ctx context.Context) error
}

// RunningInterrupter is a synchronous Image engine whose interrupt names no
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

// Sizer is an LLM engine that reports the memory each loaded model takes,
// which memory-aware admission learns footprints from (Ollama's /api/ps).
type Sizer interface {
	// Residents lists the models loaded now with their sizes.
	Residents(ctx context.Context) ([]Resident, error)
	// EvictsIdle reports whether the engine unloads its own idle models
	// to make room for another it is asked for (Ollama does): their
	// memory counts as available to that engine.
	EvictsIdle() bool
}

// Resident is a model loaded on an engine.
type Resident struct {
	Model string
	Size  int64 // bytes the model takes in all
	VRAM  int64 // of which on the GPU: less than Size when partly offloaded
}
