// Package vllm is the engine adapter of a vLLM server started with sleep
// mode.
package vllm

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm"
)

// Engine is the LLM engine of a vLLM server started with sleep mode
// (VLLM_SERVER_DEV_MODE=1 and --enable-sleep-mode). It is emptied by a
// level-1 sleep, which moves the weights to host memory and drops the KV
// cache; asleep, it queues requests and never wakes by itself, so it is a
// Waker.
type Engine struct {
	name string
	c    *vllm.Client
	poll time.Duration
	// slept is set once this adapter put it to sleep at level 1, until
	// its wake: only then does is_sleeping prove the weights are off the
	// GPU (a level-0 sleep, or a partial wake, keeps them there).
	slept atomic.Bool
}

// New adapts c, the engine named name; /is_sleeping is polled at most
// poll apart during a wake.
func New(name string, c *vllm.Client, poll time.Duration) *Engine {
	return &Engine{name: name, c: c, poll: poll}
}

func (e *Engine) Kind() string { return Kind.Name }

// Descriptor implements engine.Described.
func (e *Engine) Descriptor() *engine.Kind { return Kind }
func (e *Engine) Name() string             { return e.name }
func (e *Engine) URL() string              { return e.c.URL() }

// noSleep explains a vLLM without its sleep routes.
func (e *Engine) noSleep(err error) error {
	return fmt.Errorf("%s %w: %v (start it with VLLM_SERVER_DEV_MODE=1 and --enable-sleep-mode)", e.name, engine.ErrCannotEmpty, err)
}

// Loaded implements engine.LLM: its model, unless it sleeps.
func (e *Engine) Loaded(ctx context.Context) ([]string, error) {
	asleep, err := e.c.IsSleeping(ctx)
	switch {
	case errors.Is(err, vllm.ErrNoSleepMode):
		return nil, e.noSleep(err)
	case err != nil || asleep:
		return nil, err
	}
	return e.c.Models(ctx)
}

// Empty implements engine.LLM: a level-1 sleep that lets running requests
// finish, confirmed by /is_sleeping. A vLLM that refuses connections is
// counted empty by the orchestration only once its engine-core workers,
// which hold the memory, are gone.
func (e *Engine) Empty(ctx context.Context, _ *zap.Logger, _ time.Time) ([]string, error, error) {
	models, err := e.Loaded(ctx)
	if err == nil && len(models) == 0 && !e.slept.Load() {
		// Asleep, but not by us: at what level is unknown. Wake it (no
		// other engine runs yet) and sleep it at level 1.
		if err = e.c.WakeAndConfirm(ctx, e.poll); err == nil {
			models, err = e.c.Models(ctx)
		}
	}
	if err == nil && !e.slept.Load() {
		if err = e.c.SleepAndConfirm(ctx); err == nil {
			e.slept.Store(true)
		}
	}
	switch {
	case errors.Is(err, engine.ErrCannotEmpty): // it answered
		return nil, nil, err
	case errors.Is(err, vllm.ErrNoSleepMode):
		return nil, nil, e.noSleep(err)
	}
	return models, err, engine.RefusedAsEmpty(err)
}

// UnloadSoon implements engine.LLM. It asks for nothing: asleep, vLLM
// would queue the requests still to come in the drain.
func (e *Engine) UnloadSoon(context.Context) (int, error) { return 0, nil }

// Warm implements engine.LLM: vLLM serves the one model it was started
// with, loaded once awake.
func (e *Engine) Warm(context.Context, string) error {
	return fmt.Errorf("%s: %w", e.name, engine.ErrNoWarm)
}

// Asleep implements engine.Waker.
func (e *Engine) Asleep(ctx context.Context) (bool, error) { return e.c.IsSleeping(ctx) }

// Wake implements engine.Waker: /wake_up, confirmed by /is_sleeping
// false. A vLLM that refuses connections starts awake when it starts
// again.
func (e *Engine) Wake(ctx context.Context) error {
	err := e.c.WakeAndConfirm(ctx, e.poll)
	if err != nil && jsonhttp.Refused(err) {
		err = nil
	}
	if err == nil {
		e.slept.Store(false)
	}
	return err
}

// Inherit implements engine.Inheritor: a new adapter of the same vLLM knows
// whether the old one put it to sleep.
func (e *Engine) Inherit(old engine.Engine) {
	if o, ok := old.(*Engine); ok && o.URL() == e.URL() {
		e.slept.Store(o.slept.Load())
	}
}

var (
	_ engine.LLM       = (*Engine)(nil)
	_ engine.Waker     = (*Engine)(nil)
	_ engine.Inheritor = (*Engine)(nil)
)
