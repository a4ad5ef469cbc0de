package gpu

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap"
)

// LlamaSwap is the LLMEngine of a llama-swap proxy: it starts a model's
// server on demand, and its unload returns once every server has exited.
type LlamaSwap struct {
	name string
	c    *llamaswap.Client
}

// NewLlamaSwap adapts c, the engine named name.
func NewLlamaSwap(name string, c *llamaswap.Client) *LlamaSwap { return &LlamaSwap{name: name, c: c} }

func (e *LlamaSwap) Kind() string { return "llamaswap" }
func (e *LlamaSwap) Name() string { return e.name }
func (e *LlamaSwap) URL() string  { return e.c.URL() }

// Loaded implements LLMEngine: the models whose server runs (starting,
// ready or stopping).
func (e *LlamaSwap) Loaded(ctx context.Context) ([]string, error) {
	procs, err := e.c.Running(ctx)
	names := make([]string, len(procs))
	for i, p := range procs {
		names[i] = p.Model
	}
	return names, err
}

// Empty implements LLMEngine: the unload, confirmed by /running listing
// nothing. A llama-swap that refuses connections runs no server (they are
// its children, in its process group).
func (e *LlamaSwap) Empty(ctx context.Context, log *zap.Logger, _ time.Time) ([]string, error, error) {
	names, err := e.c.Empty(ctx)
	return names, err, refusedAsEmpty(log, e.name, err)
}

// UnloadSoon implements LLMEngine. It asks for nothing: llama-swap's
// unload cuts the requests still running.
func (e *LlamaSwap) UnloadSoon(context.Context) (int, error) { return 0, nil }

// Warm implements LLMEngine: llama-swap loads a model only for a request
// to it.
func (e *LlamaSwap) Warm(context.Context, string) error {
	return fmt.Errorf("%s: %w", e.name, ErrNoWarm)
}

var _ LLMEngine = (*LlamaSwap)(nil)
