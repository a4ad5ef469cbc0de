// Package a1111 is the engine adapter of an AUTOMATIC1111 or Forge web
// UI.
package a1111

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111"
)

// Engine is the image engine of an AUTOMATIC1111 or Forge web UI started
// with --api. Its jobs are synchronous: a txt2img request lasts for the
// whole job. After a job it is freed by unloading its checkpoint; A1111
// does not move the checkpoint back to the GPU by itself, so the next job
// is prepared with a reload (a no-op on Forge, which reloads on demand).
// Jobs started in its own UI are seen through /sdapi/v1/progress.
type Engine struct {
	name     string
	c        *a1111.Client
	progress time.Duration // how often /progress is read for jobs from its UI
	poll     time.Duration // the longest interval between polls while waiting
	// unloaded is set once a free was sent, until the next reload.
	unloaded atomic.Bool
}

// New adapts c, the engine named name. /progress is read every
// progress for jobs started in its UI; while a job drains or a free is
// confirmed, /progress and /memory are polled at most poll apart.
func New(name string, c *a1111.Client, progress, poll time.Duration) *Engine {
	e := &Engine{name: name, c: c, progress: progress, poll: poll}
	// Whether a free of an earlier config left the checkpoint off the
	// GPU is unknown: the first job reloads it (harmless when loaded).
	e.unloaded.Store(true)
	return e
}

func (e *Engine) Kind() string { return Kind.Name }

// Descriptor implements engine.Described.
func (e *Engine) Descriptor() *engine.Kind { return Kind }
func (e *Engine) Name() string             { return e.name }
func (e *Engine) URL() string              { return e.c.URL() }

// Synchronous implements engine.Image: the answer comes at the job's end.
func (e *Engine) Synchronous() bool { return true }

// Watch implements engine.Image by polling /sdapi/v1/progress.
func (e *Engine) Watch(_ string, report func(bool, error)) engine.Watch {
	return &progressWatch{e: e, report: report, changed: make(chan struct{})}
}

// Queue implements engine.Image: job_count is the running job's count of
// images (-1 while it loads its model); requests waiting for A1111's queue
// lock do not show.
func (e *Engine) Queue(ctx context.Context) (running, pending int, err error) {
	p, err := e.c.Progress(ctx)
	if err != nil || p.JobCount == 0 {
		return 0, 0, err
	}
	return 1, 0, nil
}

// WaitJob implements engine.Image: a synchronous job has ended when its
// request has.
func (e *Engine) WaitJob(context.Context, string, engine.Watch) (string, error) {
	return "success", nil
}

// WaitIdle implements engine.Image.
func (e *Engine) WaitIdle(ctx context.Context, _ engine.Watch) error {
	return e.c.WaitIdle(ctx, e.poll)
}

// Interrupt implements engine.Image: the running job stops at its next
// step. A1111's interrupt names no job, so none is sent while work from
// its own UI runs (its job is "task(…)"): that is someone else's, which
// the turnstile's job waits behind inside A1111. The caller sends it again
// while its job is to be stopped.
func (e *Engine) Interrupt(ctx context.Context, _ string) error {
	if p, err := e.c.Progress(ctx); err == nil && strings.HasPrefix(p.Job, "task(") {
		return nil
	}
	return e.c.Interrupt(ctx)
}

// InterruptRunning implements engine.RunningInterrupter.
func (e *Engine) InterruptRunning(ctx context.Context) (landed bool, err error) {
	p, err := e.c.Progress(ctx)
	switch {
	case err != nil:
		return false, err
	case strings.HasPrefix(p.Job, "task("):
		return false, nil // the UI's work, which the job waits behind
	case p.JobCount != 0 && p.Interrupted:
		return true, nil
	}
	if err := e.c.Interrupt(ctx); err != nil {
		return false, err
	}
	return p.JobCount != 0, nil
}

// WasInterrupted implements engine.RunningInterrupter: /progress keeps
// the flag of an interrupt after an API job until the next job begins.
func (e *Engine) WasInterrupted(ctx context.Context) (bool, error) {
	p, err := e.c.Progress(ctx)
	return p.Interrupted, err
}

// Free implements engine.Image: unload-checkpoint, confirmed by this
// process's reserved CUDA memory falling in /sdapi/v1/memory.
func (e *Engine) Free(ctx context.Context) (bool, error) {
	// Whatever the confirmation says, the unload may have been carried
	// out: the next job reloads (harmless if the checkpoint is there).
	e.unloaded.Store(true)
	confirmed, err := e.c.FreeAndConfirm(ctx, e.poll)
	if errors.Is(err, a1111.ErrNoGPUReading) {
		return false, engine.Mark(err, engine.ErrNoGPUReading)
	}
	return confirmed, err
}

// Prepare implements engine.Preparer: after a free, reload-checkpoint
// moves the checkpoint back to the GPU.
func (e *Engine) Prepare(ctx context.Context) error {
	if !e.unloaded.Load() {
		return nil
	}
	if err := e.c.ReloadCheckpoint(ctx); err != nil {
		return err
	}
	e.unloaded.Store(false)
	return nil
}

var (
	_ engine.Image              = (*Engine)(nil)
	_ engine.Preparer           = (*Engine)(nil)
	_ engine.RunningInterrupter = (*Engine)(nil)
)
