package gpu

import (
	"context"
	"slices"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// activity is what holds or waits for the GPU, and why: one value, under
// GPU.mu, that every change goes through and the status reads. The lock
// counts the LLM requests that share the GPU itself, so that the LLM fast
// path takes no other mutex; everything else is here.
type activity struct {
	// job is the image work that holds the GPU: a proxied job with its
	// phase, the start-up probe, or work queued directly on the image
	// engine. Replaced, never changed in place, so a copy can be read.
	job *Job
	// image is the proxied image job that job describes, for CancelJob;
	// nil while job is the start-up probe or work started directly. Set
	// and cleared with job.
	image *ImageJob
	// probing is set while job is the start-up probe.
	probing bool
	// direct holds, by image engine name, work started on it directly:
	// from the moment it is seen until the GPU has been given back after
	// it.
	direct map[string]bool
	// warming is set while a warm-up holds a shared place.
	warming bool
	// holds are the external holds that own the GPU.
	holds map[string]*Hold
	// waiters are the requests waiting for the GPU, by id.
	waiters map[uint64]waiter
	lastID  uint64
}

// waiter is a request waiting for the GPU.
type waiter struct {
	kind       lock.State
	since      time.Time
	waitingFor string // "vram" for a request that waits for memory, not for the lock
	Waiter
}

// Waiter is what the status shows of a request that waits for the GPU,
// beyond its kind and since when: the caller knows it, and hands it in
// with WithWaiter.
type Waiter struct {
	Path  string // the request's path
	Model string // the model the request names, if known without reading more of it
	Owner string // a hold's owner
	// Client is an image job's client as a hash of the client_id its body
	// names (admit.ClientHash), never the id itself: a ComfyUI tab finds
	// its own prompt by it.
	Client string
	// Force is a hold's "force": the LLM engines' processes left alive
	// or unseen do not keep the GPU from it (the operator says they hold
	// nothing).
	Force bool

	// What the prediction of its start needs (predict.go), set by the
	// GPU itself: an image job's workflow signature and engine, a hold's
	// lease, and whether it is a presence hold.
	workflow string
	engine   string
	lease    time.Duration
	presence bool
}

// WaiterStatus is one waiting request as the status shows it.
type WaiterStatus struct {
	Kind  string    `json:"kind"` // llm, image or hold
	Since time.Time `json:"since"`
	Path  string    `json:"path,omitempty"`
	Model string    `json:"model,omitempty"`
	Owner string    `json:"owner,omitempty"`
	// WaitingFor is "vram" for a request that waits for video memory
	// (vram_admission) rather than for the lock, "vram_reading" for one
	// that waits for a fresh reading of it (vram_stale wait); for any
	// other, what keeps the GPU from it now: "job", "llm", "hold",
	// "presence", "unload", "free" or "wake" (predict.go).
	WaitingFor string `json:"waiting_for,omitempty"`
	// Position is its place in the order it will be served, 1 = next,
	// among the waiters that wait for the same thing: the lock's queue
	// (the LLM waiters, admitted together, share one), or video memory.
	Position int `json:"position"`
	// ExpectedStart is when it is expected to have the GPU, from what
	// was measured here (Status.Learned); null when that cannot be
	// predicted.
	ExpectedStart *time.Time `json:"expected_start"`
	// Client is an image waiter's Waiter.Client.
	Client string `json:"client,omitempty"`
}

// maxWaitersShown bounds the waiters the status lists: the oldest are the
// ones to explain.
const maxWaitersShown = 100

type waiterKey struct{}

// WithWaiter returns ctx carrying w: a wait for the GPU under ctx shows
// w in the status.
func WithWaiter(ctx context.Context, w Waiter) context.Context {
	return context.WithValue(ctx, waiterKey{}, w)
}

func waiterFrom(ctx context.Context) Waiter {
	w, _ := ctx.Value(waiterKey{}).(Waiter)
	return w
}

// wait records a request that starts to wait for the GPU; the returned
// func records the end of its wait.
func (g *GPU) wait(ctx context.Context, kind lock.State, since time.Time) (done func()) {
	return g.waitFor(ctx, kind, since, "")
}

// waitFor is wait for a request that waits for what (see
// WaiterStatus.WaitingFor).
func (g *GPU) waitFor(ctx context.Context, kind lock.State, since time.Time, what string) (done func()) {
	g.mu.Lock()
	g.act.lastID++
	id := g.act.lastID
	if g.act.waiters == nil {
		g.act.waiters = map[uint64]waiter{}
	}
	g.act.waiters[id] = waiter{kind: kind, since: since, waitingFor: what, Waiter: waiterFrom(ctx)}
	g.touch()
	g.mu.Unlock()
	return func() { g.update(func() { delete(g.act.waiters, id) }) }
}

// What a request waiting for video memory waits for: room on the card,
// or a fresh reading of it (vram_stale wait).
const (
	waitingForVRAM    = "vram"
	waitingForReading = "vram_reading"
)

// waitingFor reports whether a request waits for what (see
// WaiterStatus.WaitingFor); g.mu is held.
func (a *activity) waitingFor(what string) bool {
	for _, w := range a.waiters {
		if w.waitingFor == what {
			return true
		}
	}
	return false
}

// oldestWait is when the longest-waiting request began to wait (zero if
// none waits); g.mu is held.
func (a *activity) oldestWait() time.Time {
	var o time.Time
	for _, w := range a.waiters {
		if o.IsZero() || w.since.Before(o) {
			o = w.since
		}
	}
	return o
}

// waiterIDs returns the waiters' ids, oldest first; g.mu is held.
func (a *activity) waiterIDs() []uint64 {
	ids := make([]uint64, 0, len(a.waiters))
	for id := range a.waiters {
		ids = append(ids, id)
	}
	// Ids grow in the order waits began.
	slices.Sort(ids)
	return ids
}

// waiterList returns the oldest waiters, oldest first; g.mu is held.
func (a *activity) waiterList() []WaiterStatus {
	ids := a.waiterIDs()
	ids = ids[:min(len(ids), maxWaitersShown)]
	out := make([]WaiterStatus, len(ids))
	for i, id := range ids {
		w := a.waiters[id]
		out[i] = WaiterStatus{Kind: w.kind.String(), Since: w.since, Path: w.Path, Model: w.Model, Owner: w.Owner, WaitingFor: w.waitingFor}
		out[i].Client = w.Client
	}
	return out
}

func (g *GPU) setJob(j *Job) { g.update(func() { g.setJobLocked(j) }) }

// setJobLocked records j as the work holding the GPU; with nil, the
// watches look again for work started directly. g.mu is held.
func (g *GPU) setJobLocked(j *Job) {
	g.act.job = j
	if j == nil {
		g.pokeDirect()
	}
}

// setPhase changes the phase of the image work holding the GPU.
func (g *GPU) setPhase(phase string) {
	g.update(func() {
		if g.act.job != nil {
			j := *g.act.job
			j.Phase = phase
			g.act.job = &j
		}
	})
}

func (g *GPU) setPromptID(id string) {
	g.update(func() {
		if g.act.job != nil {
			j := *g.act.job
			j.PromptID, j.Phase = id, "running"
			g.act.job = &j
		}
	})
}

// Probing reports whether the start-up probe holds the GPU: the image
// engine is being asked whether work was queued before Caddy started.
func (g *GPU) Probing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.act.probing
}

// takeDirect reports whether work started directly on e should now be
// given the GPU: no job of ours on e holds it (a job drains e's queue
// before it ends) and nobody is taking care of such work yet. If so, the
// caller takes care of it and calls endDirect when done.
func (g *GPU) takeDirect(e ImageEngine) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	name := e.Name()
	if (g.act.job != nil && g.act.job.Engine == name) || g.act.direct[name] {
		return false
	}
	if g.act.direct == nil {
		g.act.direct = map[string]bool{}
	}
	g.act.direct[name] = true
	return true
}

func (g *GPU) endDirect(e ImageEngine) { g.endDirectNamed(e.Name()) }

func (g *GPU) endDirectNamed(name string) {
	g.update(func() {
		delete(g.act.direct, name)
		g.pokeDirect()
	})
}

func (g *GPU) setWarming(on bool) { g.update(func() { g.act.warming = on }) }

// imageJobRunning reports whether an image job holds the GPU now.
func (g *GPU) imageJobRunning() bool {
	running := false
	g.lock.View(func(s lock.Snapshot) {
		g.mu.Lock()
		running = g.act.job != nil && s.State == lock.Image
		g.mu.Unlock()
	})
	return running
}

// use is one exclusive use of the GPU (an image job, a hold, the start-up
// probe, work queued directly), from the moment the lock is held until
// end gives it back, exactly once.
type use struct {
	g *GPU
	c *Config
	// warmAfter is set once the LLM engine has been emptied for this use:
	// the warm model is loaded again when the GPU goes back to LLM use.
	warmAfter bool
	// owesFree is set once image work ran that may have left memory
	// behind: the image engine is freed before the GPU goes to LLM use
	// (or handed over to the next exclusive user, who then owes it).
	owesFree bool
	ended    bool
	tr       traced // the request it serves, for its spans (trace.go)
}

// end gives the GPU back: to the next exclusive waiter directly, or to
// LLM use, then warming the warm model if warmAfter says so.
func (u *use) end() {
	if u.ended {
		return
	}
	u.ended = true
	g := u.g
	owes := u.owesFree || g.owed()
	g.mu.Lock()
	g.releasing = u
	g.mu.Unlock()
	handedOver := g.lock.ReleaseExclusive(owes)
	g.mu.Lock()
	if g.releasing == u {
		g.releasing = nil
	}
	g.mu.Unlock()
	if !handedOver && u.warmAfter {
		g.warm(u.tr.req)
	}
}
