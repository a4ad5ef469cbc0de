package gpu

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// reachableWindow is how long a successful contact with an engine vouches
// for it: past it, a readiness check probes the engine again.
const reachableWindow = 10 * time.Second

// Ready reports whether a request of class ("llm" or "image") would be
// let through now, and the status it judged from. It would if a new LLM
// request would be admitted at once (state idle or llm, no exclusive
// holder, waiter or free: the lock's own rule), and an engine of the
// class is reachable: its last contact succeeded within reachableWindow,
// or a probe of it (Loaded for an LLM engine, Queue for an image engine:
// Ollama's /api/ps, ComfyUI's /queue, ...) succeeds now, within
// probe_timeout. An engine never contacted is probed; one whose forward
// failed (NoteUnreachable) is probed at once.
func (g *GPU) Ready(ctx context.Context, class string) (bool, Status) {
	c := g.cfg()
	if c == nil || g.lock.Snapshot().SharedWaits {
		return false, g.Status()
	}
	var engines []Engine
	switch class {
	case "llm":
		for _, e := range c.LLMs {
			engines = append(engines, e)
		}
	case "image":
		for _, e := range c.Images {
			engines = append(engines, e)
		}
	}
	reachable := g.anyReachable(ctx, c, engines)
	snap := g.lock.Snapshot() // the probe may have taken a while
	return reachable && !snap.SharedWaits, g.statusAt(snap)
}

// anyReachable reports whether one of engines is reachable: at once if
// one was in contact lately, else once a probe of one succeeds (all are
// probed at once).
func (g *GPU) anyReachable(ctx context.Context, c *Config, engines []Engine) bool {
	now := time.Now()
	g.mu.Lock()
	for _, e := range engines {
		if g.runLocked(e.Name()).up.fresh(now, reachableWindow) {
			g.mu.Unlock()
			return true
		}
	}
	g.mu.Unlock()
	// Buffered for every engine: a probe outlives a check that gave up.
	errs := make(chan error, len(engines))
	for _, e := range engines {
		if !g.spawn(func() { errs <- g.probe(c, e) }) {
			errs <- g.ctx.Err() // closing
		}
	}
	for range engines {
		select {
		case err := <-errs:
			if err == nil {
				return true
			}
		case <-ctx.Done():
			return false
		}
	}
	return false
}

// probeCall shares one engine's readiness probe among the checks that
// ask while it is in flight.
type probeCall struct {
	flight singleflight.Group
}

// probe contacts the engine, or joins the probe of it already in flight:
// an engine is probed once at a time, however many checks ask. The probe
// is bounded by probe_timeout and by the GPU's life, not by a caller's
// context: a check that gives up does not cut it short for the others.
func (g *GPU) probe(c *Config, e Engine) error {
	g.mu.Lock()
	run := g.runLocked(e.Name())
	if run.probe == nil {
		run.probe = &probeCall{}
	}
	calls := run.probe
	g.mu.Unlock()
	_, err, _ := calls.flight.Do("", func() (any, error) {
		ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
		defer cancel()
		err := contact(ctx, e)
		if err != nil {
			g.log().Debug(e.Name()+" not reachable for a readiness check", zap.Error(err))
		}
		g.probed(e, err)
		return nil, err
	})
	return err
}

// contact makes the cheapest call that shows the engine answers. An
// engine that answers that it cannot be emptied answers all the same.
func contact(ctx context.Context, e Engine) error {
	var err error
	switch e := e.(type) {
	case LLMEngine:
		_, err = e.Loaded(ctx)
	case ImageEngine:
		_, _, err = e.Queue(ctx)
	}
	if errors.Is(err, ErrCannotEmpty) {
		return nil
	}
	return err
}

// NoteUnreachable records that a request forwarded to the engine named
// name could not reach it: the next readiness check probes it again
// rather than trust an earlier contact.
func (g *GPU) NoteUnreachable(name string, err error) {
	if c := g.cfg(); c != nil {
		if e := c.engine(name); e != nil {
			g.probed(e, err)
		}
	}
}

// engine returns c's engine named name, or nil.
func (c *Config) engine(name string) Engine {
	for _, e := range c.LLMs {
		if e.Name() == name {
			return e
		}
	}
	for _, e := range c.Images {
		if e.Name() == name {
			return e
		}
	}
	return nil
}
