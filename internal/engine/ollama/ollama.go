// Package ollama is the engine adapter of an Ollama server.
package ollama

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// abortSettle is how long after LLM use that ended abnormally (a client
// gone mid-load, a warm-up cut short, an upstream error) an empty /api/ps
// is no evidence. A model that is loading is not listed; Ollama aborts a
// load whose client went away, and its runner exits some 300 ms later,
// holding memory until then.
const abortSettle = time.Second

// errOllamaBusy is the error of an Ollama that could not be emptied.
var errOllamaBusy = fmt.Errorf("ollama %w", engine.ErrNotEmptied)

// Engine is the LLM engine of an Ollama server.
type Engine struct {
	name string
	c    *ollama.Client
	poll time.Duration // the longest interval between /api/ps polls
}

// New adapts c, the engine named name; unloads are polled at most
// poll apart.
func New(name string, c *ollama.Client, poll time.Duration) *Engine {
	return &Engine{name: name, c: c, poll: poll}
}

func (o *Engine) Kind() string { return Kind.Name }

// Descriptor implements engine.Described.
func (o *Engine) Descriptor() *engine.Kind { return Kind }
func (o *Engine) Name() string             { return o.name }
func (o *Engine) URL() string              { return o.c.URL() }

// Loaded implements engine.LLM through /api/ps.
func (o *Engine) Loaded(ctx context.Context) ([]string, error) {
	models, err := o.c.PS(ctx)
	names := make([]string, len(models))
	for i, m := range models {
		names[i] = m.Name
	}
	return names, err
}

// Residents implements engine.Sizer through /api/ps: size is the
// model's whole size, size_vram the part on the GPU.
func (o *Engine) Residents(ctx context.Context) ([]engine.Resident, error) {
	models, err := o.c.PS(ctx)
	out := make([]engine.Resident, len(models))
	for i, m := range models {
		out[i] = engine.Resident{Model: m.Name, Size: m.Size, VRAM: m.SizeVRAM}
	}
	return out, err
}

// EvictsIdle implements engine.Sizer: Ollama unloads idle models to make
// room for one it is asked to load.
func (o *Engine) EvictsIdle() bool { return true }

// Warm implements engine.LLM.
func (o *Engine) Warm(ctx context.Context, model string) error { return o.c.Warm(ctx, model, "") }

// UnloadSoon sends the unloads without waiting for them: Ollama carries
// each out once the model's running requests have finished.
func (o *Engine) UnloadSoon(ctx context.Context) (int, error) {
	models, err := o.c.PS(ctx)
	if err != nil {
		return 0, err
	}
	for _, m := range models {
		o.c.Unload(ctx, m.Name)
	}
	return len(models), nil
}

// Empty implements engine.LLM. Normally an empty /api/ps is the
// confirmation; after abnormal LLM use it is confirmed as
// confirmAfterAbort says. An Ollama that refuses connections is counted
// empty by the orchestration only once its runners are gone (Kind.Servers
// finds them).
func (o *Engine) Empty(ctx context.Context, _ *zap.Logger, abnormal time.Time) ([]string, error, error) {
	names, err := o.c.UnloadAll(ctx, o.poll)
	if err == nil && !abnormal.IsZero() {
		var more []string
		more, err = o.confirmAfterAbort(ctx, abnormal)
		names = append(names, more...)
	}
	return names, err, engine.RefusedAsEmpty(err)
}

// EmptyBut implements engine.Keeper: an /api/ps that lists only the kept
// models is the confirmation.
func (o *Engine) EmptyBut(ctx context.Context, _ *zap.Logger, keep func(model string) bool) (unloaded, kept []string, contact, err error) {
	unloaded, kept, err = o.c.UnloadAllBut(ctx, o.poll, keep)
	return unloaded, kept, err, engine.RefusedAsEmpty(err)
}

// confirmAfterAbort confirms that Ollama is empty after LLM use that ended
// abnormally at since: it waits until abortSettle has passed, then until
// /api/ps lists nothing and, for an Ollama on this host, no runner process
// of it is alive, both at once. Models that appear meanwhile (a load that
// finished after all) are unloaded.
func (o *Engine) confirmAfterAbort(ctx context.Context, since time.Time) ([]string, error) {
	if err := poll.Sleep(ctx, time.Until(since.Add(abortSettle))); err != nil {
		return nil, fmt.Errorf("%w: the deadline passed while an aborted load could still be running", errOllamaBusy)
	}
	var names []string
	pace := poll.New(o.poll)
	for {
		more, err := o.c.UnloadAll(ctx, o.poll)
		names = append(names, more...)
		if err != nil {
			return names, err
		}
		runners, visible, rerr := o.c.LocalRunners(ctx)
		if !visible || (rerr == nil && len(runners) == 0) {
			return names, nil
		}
		if pace.Wait(ctx) != nil {
			if rerr != nil {
				return names, fmt.Errorf("%w: its runner processes could not be listed: %v", errOllamaBusy, rerr)
			}
			return names, fmt.Errorf("%w: it lists no model, but %s still alive: a load may still be running", errOllamaBusy, describeRunners(runners))
		}
	}
}

func describeRunners(rs []ollama.Runner) string {
	if len(rs) == 1 {
		return fmt.Sprintf("its runner process %d (%s) is", rs[0].PID, rs[0].Model)
	}
	pids := make([]int32, len(rs))
	for i, r := range rs {
		pids[i] = r.PID
	}
	return fmt.Sprintf("%d runner processes of it %v are", len(rs), pids)
}

var (
	_ engine.LLM    = (*Engine)(nil)
	_ engine.Sizer  = (*Engine)(nil)
	_ engine.Keeper = (*Engine)(nil)
)
