// Package comfyui is the engine adapter of a ComfyUI server, and the
// probe that reads the card's free memory through it.
package comfyui

import (
	"context"
	"errors"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
)

// Engine is the image engine of a ComfyUI server.
type Engine struct {
	name string
	c    *comfy.Client
	Options
}

// Options are the intervals a Comfy engine polls and reconnects at.
type Options struct {
	HistoryPoll                time.Duration // a job's history, while the websocket is down
	FreePoll                   time.Duration // /system_stats, while a free is confirmed
	BackoffInitial, BackoffMax time.Duration // reconnecting the websocket
}

// New adapts c, the engine named name.
func New(name string, c *comfy.Client, o Options) *Engine {
	return &Engine{name: name, c: c, Options: o}
}

func (e *Engine) Kind() string { return Kind.Name }

// Descriptor implements engine.Described.
func (e *Engine) Descriptor() *engine.Kind { return Kind }
func (e *Engine) Name() string             { return e.name }
func (e *Engine) URL() string              { return e.c.URL() }

// Synchronous implements engine.Image: a prompt is queued, and its
// prompt_id followed to the job's end.
func (e *Engine) Synchronous() bool { return false }

// Watch implements engine.Image with ComfyUI's /ws.
func (e *Engine) Watch(clientID string, report func(bool, error)) engine.Watch {
	return e.c.NewWatcher(clientID, e.BackoffInitial, e.BackoffMax, report)
}

// watcher is w as the client's, or nil.
func watcher(w engine.Watch) *comfy.Watcher {
	cw, _ := w.(*comfy.Watcher)
	return cw
}

// Queue implements engine.Image.
func (e *Engine) Queue(ctx context.Context) (running, pending int, err error) {
	r, p, err := e.c.Queue(ctx)
	return len(r), len(p), err
}

// WaitJob implements engine.Image.
func (e *Engine) WaitJob(ctx context.Context, id string, w engine.Watch) (string, error) {
	outcome, err := e.c.WaitJob(ctx, id, watcher(w), e.HistoryPoll)
	return string(outcome), err
}

// WaitIdle implements engine.Image.
func (e *Engine) WaitIdle(ctx context.Context, w engine.Watch) error {
	return e.c.WaitIdle(ctx, watcher(w), e.HistoryPoll)
}

// Interrupt implements engine.Image.
func (e *Engine) Interrupt(ctx context.Context, id string) error { return e.c.Interrupt(ctx, id) }

// Free implements engine.Image: POST /free, confirmed by PyTorch's reserved
// memory falling in /system_stats.
func (e *Engine) Free(ctx context.Context) (bool, error) {
	freed, err := e.c.FreeAndConfirm(ctx, e.FreePoll)
	if errors.Is(err, comfy.ErrNoGPUReading) {
		return false, engine.Mark(err, engine.ErrNoGPUReading)
	}
	return freed != comfy.FreedUnverified, err
}

var _ engine.Image = (*Engine)(nil)
