package httpapi

import (
	"context"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// Turnstile is one turnstile as its routes see it: the orchestration of
// its GPU, and what its running config tells them.
type Turnstile struct {
	GPU
	Config Config
}

// GPU is what the routes use of a turnstile's *gpu.GPU.
type GPU interface {
	Name() string
	Status() gpu.Status
	History(since time.Time) gpu.HistoryView
	Subscribe() (*gpu.Subscription, error)
	Ready(ctx context.Context, class string) (bool, gpu.Status)
	TakeHold(ctx context.Context, owner string, ttl time.Duration) (*gpu.Hold, error)
	TryHold(ctx context.Context, owner string, ttl time.Duration) (*gpu.Hold, error)
	FindHold(id string) *gpu.Hold
	CancelJob(ctx context.Context) (gpu.Cancelled, error)
	ForceEndJob(ctx context.Context, by string) (gpu.Cancelled, error)
}

var _ GPU = (*gpu.GPU)(nil)

// Config is what a turnstile's running config, and the requests waiting
// for its GPU, tell its routes. The root's runtime implements it.
type Config interface {
	// Facts is what they add to the GPU's status.
	Facts() Facts
	// HoldWait is image_wait_timeout, a new hold's default wait_timeout;
	// false while no config has started.
	HoldWait() (time.Duration, bool)
	// RetryAfter is the Retry-After, in seconds, of an answer that the
	// GPU is busy.
	RetryAfter() int
}

// Facts is what a turnstile's running config and its waiting requests add
// to its GPU's status; zero but for the buffer's counts while no config
// has started.
type Facts struct {
	WaitBuffer   WaitBufferStatus
	WaitingLimit int      // max_waiting
	Warnings     []string // what the running config got wrong, seen at run time
	// PublicWarnings are Warnings without the addresses they name.
	PublicWarnings []string
}

// Turnstiles are every turnstile, for the admin endpoint's routes.
type Turnstiles interface {
	// Find returns the named turnstile ("" names the default one);
	// false if there is none.
	Find(name string) (Turnstile, bool)
	// Range calls f for each turnstile until it returns false.
	Range(f func(Turnstile) bool)
}
