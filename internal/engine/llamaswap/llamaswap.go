// Package llamaswap is the engine adapter of a llama-swap proxy.
package llamaswap

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap"
)

// Engine is the LLM engine of a llama-swap proxy: it starts a model's
// server on demand, and its unload returns once every server has exited.
type Engine struct {
	name string
	c    *llamaswap.Client
}

// New adapts c, the engine named name.
func New(name string, c *llamaswap.Client) *Engine { return &Engine{name: name, c: c} }

func (e *Engine) Kind() string { return Kind.Name }

// Descriptor implements engine.Described.
func (e *Engine) Descriptor() *engine.Kind { return Kind }
func (e *Engine) Name() string             { return e.name }
func (e *Engine) URL() string              { return e.c.URL() }

// Loaded implements engine.LLM: the models whose server runs (starting,
// ready or stopping).
func (e *Engine) Loaded(ctx context.Context) ([]string, error) {
	procs, err := e.c.Running(ctx)
	names := make([]string, len(procs))
	for i, p := range procs {
		names[i] = p.Model
	}
	return names, err
}

// Empty implements engine.LLM: the unload, confirmed by /running listing
// nothing. The unload answers once each `cmd` process has exited, which
// is no proof that what a wrapper started has; and a llama-swap that
// refuses connections may have left its model servers running (they are
// in process groups of their own): the orchestration confirms both by
// the processes (Kind.Servers).
func (e *Engine) Empty(ctx context.Context, _ *zap.Logger, _ time.Time) ([]string, error, error) {
	names, err := e.c.Empty(ctx)
	return names, err, engine.RefusedAsEmpty(err)
}

// UnloadSoon implements engine.LLM. It asks for nothing: llama-swap's
// unload cuts the requests still running.
func (e *Engine) UnloadSoon(context.Context) (int, error) { return 0, nil }

// Warm implements engine.LLM: llama-swap loads a model only for a request
// to it.
func (e *Engine) Warm(context.Context, string) error {
	return fmt.Errorf("%s: %w", e.name, engine.ErrNoWarm)
}

var _ engine.LLM = (*Engine)(nil)
