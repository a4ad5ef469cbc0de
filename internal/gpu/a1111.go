package gpu

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111"
)

// A1111 is the ImageEngine of an AUTOMATIC1111 or Forge web UI started
// with --api. Its jobs are synchronous: a txt2img request lasts for the
// whole job. After a job it is freed by unloading its checkpoint; A1111
// does not move the checkpoint back to the GPU by itself, so the next job
// is prepared with a reload (a no-op on Forge, which reloads on demand).
// Jobs started in its own UI are seen through /sdapi/v1/progress.
type A1111 struct {
	name     string
	c        *a1111.Client
	progress time.Duration // how often /progress is read for jobs from its UI
	poll     time.Duration // the longest interval between polls while waiting
	// unloaded is set once a free was sent, until the next reload.
	unloaded atomic.Bool
}

// NewA1111 adapts c, the engine named name. /progress is read every
// progress for jobs started in its UI; while a job drains or a free is
// confirmed, /progress and /memory are polled at most poll apart.
func NewA1111(name string, c *a1111.Client, progress, poll time.Duration) *A1111 {
	e := &A1111{name: name, c: c, progress: progress, poll: poll}
	// Whether a free of an earlier config left the checkpoint off the
	// GPU is unknown: the first job reloads it (harmless when loaded).
	e.unloaded.Store(true)
	return e
}

func (e *A1111) Kind() string { return "a1111" }
func (e *A1111) Name() string { return e.name }
func (e *A1111) URL() string  { return e.c.URL() }

// Synchronous implements ImageEngine: the answer comes at the job's end.
func (e *A1111) Synchronous() bool { return true }

// Watch implements ImageEngine by polling /sdapi/v1/progress.
func (e *A1111) Watch(_ string, report func(bool, error)) Watch {
	return &progressWatch{e: e, report: report, changed: make(chan struct{})}
}

// Queue implements ImageEngine: job_count is the running job's count of
// images (-1 while it loads its model); requests waiting for A1111's queue
// lock do not show.
func (e *A1111) Queue(ctx context.Context) (running, pending int, err error) {
	p, err := e.c.Progress(ctx)
	if err != nil || p.JobCount == 0 {
		return 0, 0, err
	}
	return 1, 0, nil
}

// WaitJob implements ImageEngine: a synchronous job has ended when its
// request has.
func (e *A1111) WaitJob(context.Context, string, Watch) (string, error) { return "success", nil }

// WaitIdle implements ImageEngine.
func (e *A1111) WaitIdle(ctx context.Context, _ Watch) error { return e.c.WaitIdle(ctx, e.poll) }

// Interrupt implements ImageEngine: the running job stops at its next
// step. A1111's interrupt names no job, so none is sent while work from
// its own UI runs (its job is "task(…)"): that is someone else's, which
// the turnstile's job waits behind inside A1111. The caller sends it again
// while its job is to be stopped.
func (e *A1111) Interrupt(ctx context.Context, _ string) error {
	if p, err := e.c.Progress(ctx); err == nil && strings.HasPrefix(p.Job, "task(") {
		return nil
	}
	return e.c.Interrupt(ctx)
}

// InterruptRunning implements RunningInterrupter.
func (e *A1111) InterruptRunning(ctx context.Context) (landed bool, err error) {
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

// WasInterrupted implements RunningInterrupter: /progress keeps the flag
// of an interrupt after an API job until the next job begins.
func (e *A1111) WasInterrupted(ctx context.Context) (bool, error) {
	p, err := e.c.Progress(ctx)
	return p.Interrupted, err
}

// Free implements ImageEngine: unload-checkpoint, confirmed by this
// process's reserved CUDA memory falling in /sdapi/v1/memory.
func (e *A1111) Free(ctx context.Context) (bool, error) {
	// Whatever the confirmation says, the unload may have been carried
	// out: the next job reloads (harmless if the checkpoint is there).
	e.unloaded.Store(true)
	confirmed, err := e.c.FreeAndConfirm(ctx, e.poll)
	if errors.Is(err, a1111.ErrNoGPUReading) {
		return false, mark(err, ErrNoGPUReading)
	}
	return confirmed, err
}

// Prepare implements Preparer: after a free, reload-checkpoint moves the
// checkpoint back to the GPU.
func (e *A1111) Prepare(ctx context.Context) error {
	if !e.unloaded.Load() {
		return nil
	}
	if err := e.c.ReloadCheckpoint(ctx); err != nil {
		return err
	}
	e.unloaded.Store(false)
	return nil
}

// progressWatch follows an A1111's queue by polling /progress: its UI
// generates through Gradio, which tells an outsider nothing else.
type progressWatch struct {
	e      *A1111
	report func(bool, error)

	mu      sync.Mutex
	changed chan struct{}
	count   int
	known   bool
	up      bool
}

// Run polls until ctx ends.
func (w *progressWatch) Run(ctx context.Context) {
	t := time.NewTicker(w.e.progress)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, max(w.e.progress, time.Second))
		p, err := w.e.c.Progress(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		w.note(p.JobCount, err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// note records a reading and wakes the waiters on a change. A job loading
// its model shows job_count -1: it counts as one.
func (w *progressWatch) note(count int, err error) {
	if count < 0 {
		count = 1
	}
	w.mu.Lock()
	up := err == nil
	report := up != w.up || !w.known && !up
	w.up = up
	change := up && (!w.known || count != w.count)
	if up {
		w.count, w.known = count, true
	}
	if change {
		close(w.changed)
		w.changed = make(chan struct{})
	}
	w.mu.Unlock()
	if report {
		w.report(up, err)
	}
}

// Changed implements Watch.
func (w *progressWatch) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// QueueRemaining implements Watch: job_count at the last reading.
func (w *progressWatch) QueueRemaining() (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.count, w.known
}

var (
	_ ImageEngine        = (*A1111)(nil)
	_ Preparer           = (*A1111)(nil)
	_ RunningInterrupter = (*A1111)(nil)
)
