// Package llamacpp is the engine adapter of a llama.cpp llama-server in
// router mode.
package llamacpp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// Engine is the LLM engine of a llama.cpp llama-server in router mode:
// each model runs in a child process that the router starts on demand
// (autoload) and stops on /models/unload. A single-model server (-m)
// cannot be emptied over HTTP, so it is reported and exclusive use refused.
type Engine struct {
	name string
	c    *llamacpp.Client
	poll time.Duration
}

// New adapts c, the engine named name; /models is polled at most
// poll apart while models unload or load.
func New(name string, c *llamacpp.Client, poll time.Duration) *Engine {
	return &Engine{name: name, c: c, poll: poll}
}

func (e *Engine) Kind() string { return Kind.Name }

// Descriptor implements engine.Described.
func (e *Engine) Descriptor() *engine.Kind { return Kind }
func (e *Engine) Name() string             { return e.name }
func (e *Engine) URL() string              { return e.c.URL() }

// router fails with engine.ErrCannotEmpty unless the server runs in
// router mode.
func (e *Engine) router(ctx context.Context) error {
	router, err := e.c.Router(ctx)
	switch {
	case errors.Is(err, llamacpp.ErrLoading):
		// Only a single-model server answers "Loading model": a router's
		// /props always answers.
		router = false
	case err != nil:
		return err
	}
	switch {
	case !router:
		return fmt.Errorf("%s is a single-model llama-server, which has no way to unload its model over HTTP: %w (start it in router mode, without -m)",
			e.name, engine.ErrCannotEmpty)
	}
	return nil
}

// Loaded implements engine.LLM: the models loaded, loading or sleeping.
func (e *Engine) Loaded(ctx context.Context) ([]string, error) {
	if err := e.router(ctx); err != nil {
		return nil, err
	}
	models, err := e.c.Models(ctx)
	return llamacpp.Running(models), err
}

// Empty implements engine.LLM: every model loaded, loading or sleeping is
// unloaded, and /models read until all are unloaded, which they are only
// once their child processes have exited. A router that refuses
// connections is counted empty by the orchestration only once the
// children it had are gone (a child lives until its load ends).
func (e *Engine) Empty(ctx context.Context, _ *zap.Logger, _ time.Time) ([]string, error, error) {
	err := e.router(ctx)
	if errors.Is(err, engine.ErrCannotEmpty) {
		return nil, nil, err
	}
	var names []string
	if err == nil {
		names, err = e.c.UnloadAll(ctx, e.poll)
	}
	return names, err, engine.RefusedAsEmpty(err)
}

// UnloadSoon implements engine.LLM. It asks for nothing: a child told to
// exit cuts the requests it is serving, so the unload waits until they
// have drained.
func (e *Engine) UnloadSoon(context.Context) (int, error) { return 0, nil }

// Warm implements engine.LLM: it loads model and waits until it is loaded.
func (e *Engine) Warm(ctx context.Context, model string) error {
	if err := e.c.Load(ctx, model); err != nil {
		return err
	}
	pace := poll.New(e.poll)
	for {
		models, err := e.c.Models(ctx)
		if err != nil {
			return err
		}
		for _, m := range models {
			switch {
			case m.ID != model:
			case m.Status == llamacpp.Loaded:
				return nil
			case m.Failed:
				return fmt.Errorf("%s: model %s failed to load (exit code %d)", e.name, model, m.ExitCode)
			}
		}
		if err := pace.Wait(ctx); err != nil {
			return fmt.Errorf("%s: model %s not loaded: %w", e.name, model, err)
		}
	}
}

var _ engine.LLM = (*Engine)(nil)
