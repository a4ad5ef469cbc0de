package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// LlamaCpp is the LLMEngine of a llama.cpp llama-server in router mode:
// each model runs in a child process that the router starts on demand
// (autoload) and stops on /models/unload. A single-model server (-m)
// cannot be emptied over HTTP, so it is reported and exclusive use refused.
type LlamaCpp struct {
	name string
	c    *llamacpp.Client
	poll time.Duration
}

// NewLlamaCpp adapts c, the engine named name; /models is polled at most
// poll apart while models unload or load.
func NewLlamaCpp(name string, c *llamacpp.Client, poll time.Duration) *LlamaCpp {
	return &LlamaCpp{name: name, c: c, poll: poll}
}

func (e *LlamaCpp) Kind() string { return "llamacpp" }
func (e *LlamaCpp) Name() string { return e.name }
func (e *LlamaCpp) URL() string  { return e.c.URL() }

// router fails with ErrCannotEmpty unless the server runs in router mode.
func (e *LlamaCpp) router(ctx context.Context) error {
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
			e.name, ErrCannotEmpty)
	}
	return nil
}

// Loaded implements LLMEngine: the models loaded, loading or sleeping.
func (e *LlamaCpp) Loaded(ctx context.Context) ([]string, error) {
	if err := e.router(ctx); err != nil {
		return nil, err
	}
	models, err := e.c.Models(ctx)
	return llamacpp.Running(models), err
}

// Empty implements LLMEngine: every model loaded, loading or sleeping is
// unloaded, and /models read until all are unloaded, which they are only
// once their child processes have exited. A router that refuses
// connections runs no model.
func (e *LlamaCpp) Empty(ctx context.Context, log *zap.Logger, _ time.Time) ([]string, error, error) {
	err := e.router(ctx)
	if errors.Is(err, ErrCannotEmpty) {
		return nil, nil, err
	}
	var names []string
	if err == nil {
		names, err = e.c.UnloadAll(ctx, e.poll)
	}
	return names, err, refusedAsEmpty(log, e.name, err)
}

// UnloadSoon implements LLMEngine. It asks for nothing: a child told to
// exit cuts the requests it is serving, so the unload waits until they
// have drained.
func (e *LlamaCpp) UnloadSoon(context.Context) (int, error) { return 0, nil }

// Warm implements LLMEngine: it loads model and waits until it is loaded.
func (e *LlamaCpp) Warm(ctx context.Context, model string) error {
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

var _ LLMEngine = (*LlamaCpp)(nil)
