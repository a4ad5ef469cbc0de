package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/poll"
)

// abortSettle is how long after LLM use that ended abnormally (a client
// gone mid-load, a warm-up cut short, an upstream error) an empty /api/ps
// is no evidence. A model that is loading is not listed; Ollama aborts a
// load whose client went away, and its runner exits some 300 ms later,
// holding memory until then.
const abortSettle = time.Second

// ErrOllamaBusy is returned when Ollama could not be emptied.
var ErrOllamaBusy = errors.New("ollama could not be emptied")

// markAbnormal records that LLM use has just ended in a way that may leave
// a load in flight that /api/ps does not show.
func (g *GPU) markAbnormal() { g.abnormal.Store(time.Now().UnixNano()) }

// NoteLLMEnd marks the end of a proxied LLM request as abnormal if the
// client went away or the upstream failed. It costs no allocation.
func (g *GPU) NoteLLMEnd(ctx context.Context, err error) {
	if err != nil || ctx.Err() != nil {
		g.markAbnormal()
	}
}

// unloadOllama empties Ollama before the GPU goes to an exclusive holder,
// and confirms it through /api/ps (and more, see emptyOllama).
func (g *GPU) unloadOllama(c *Config) error {
	if c.Ollama != nil {
		if err := g.emptyOllama(c); err != nil {
			return err
		}
	}
	return g.waitVRAM(c, c.UnloadTimeout, "exclusive use")
}

// emptyOllama unloads every model and confirms it, within unload_timeout.
// Normally an empty /api/ps is the confirmation. After abnormal LLM use it
// is confirmed as confirmAfterAbort says; and a refused connection counts
// as empty only as confirmNotRunning says.
func (g *GPU) emptyOllama(c *Config) error {
	ctx, cancel := context.WithTimeout(g.ctx, c.UnloadTimeout)
	defer cancel()
	start := time.Now()
	abnormal := g.abnormal.Load()
	names, err := c.Ollama.UnloadAll(ctx, c.UnloadPoll)
	if err == nil && abnormal != 0 {
		var more []string
		more, err = g.confirmAfterAbort(ctx, c, time.Unix(0, abnormal))
		names = append(names, more...)
	}
	took := time.Since(start)
	g.ollamaUp.set(err)
	if err != nil && jsonhttp.Refused(err) {
		err = g.confirmNotRunning(ctx, c, err)
	}
	if err != nil {
		g.metrics.UpstreamError("ollama", "unload")
		if errors.Is(err, ErrOllamaBusy) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrOllamaBusy, err)
	}
	g.abnormal.CompareAndSwap(abnormal, 0)
	if len(names) > 0 {
		g.metrics.Step("unload", took)
		g.history.addEvent("unload", took, fmt.Sprintf("%d model(s)", len(names)))
		g.log().Info("ollama unloaded", zap.Strings("models", names), zap.Duration("duration", took))
	}
	return nil
}

// confirmAfterAbort confirms that Ollama is empty after LLM use that ended
// abnormally at since: it waits until abortSettle has passed, then until
// /api/ps lists nothing and, for an Ollama on this host, no runner process
// of it is alive, both at once. Models that appear meanwhile (a load that
// finished after all) are unloaded.
func (g *GPU) confirmAfterAbort(ctx context.Context, c *Config, since time.Time) ([]string, error) {
	if err := sleepCtx(ctx, time.Until(since.Add(abortSettle))); err != nil {
		return nil, fmt.Errorf("%w: the deadline passed while an aborted load could still be running", ErrOllamaBusy)
	}
	var names []string
	pace := poll.New(c.UnloadPoll)
	for {
		more, err := c.Ollama.UnloadAll(ctx, c.UnloadPoll)
		names = append(names, more...)
		if err != nil {
			return names, err
		}
		runners, visible, rerr := c.Ollama.LocalRunners(ctx)
		if !visible || (rerr == nil && len(runners) == 0) {
			return names, nil
		}
		if pace.Wait(ctx) != nil {
			if rerr != nil {
				return names, fmt.Errorf("%w: its runner processes could not be listed: %v", ErrOllamaBusy, rerr)
			}
			return names, fmt.Errorf("%w: it lists no model, but %s still alive: a load may still be running", ErrOllamaBusy, describeRunners(runners))
		}
	}
}

// confirmNotRunning decides what an Ollama that refuses connections holds.
// Its runners outlive an `ollama serve` killed with SIGKILL, holding their
// memory, so a refusing local Ollama is empty only once no runner process
// of it is alive. For an Ollama on another host nothing more can be seen:
// it counts as empty (min_free_vram, if set, still checks the card).
func (g *GPU) confirmNotRunning(ctx context.Context, c *Config, refused error) error {
	pace := poll.New(c.UnloadPoll)
	logged := false
	for {
		runners, visible, err := c.Ollama.LocalRunners(ctx)
		switch {
		case !visible:
			g.log().Warn("ollama refuses connections: counted as not running; its processes are on another host and cannot be checked", zap.Error(refused))
			return nil
		case err == nil && len(runners) == 0:
			g.log().Warn("ollama refuses connections and no runner of it is alive: not running, so holding no GPU memory", zap.Error(refused))
			return nil
		case err == nil && !logged:
			logged = true
			g.log().Warn("ollama refuses connections, but runner processes of it are alive and hold GPU memory; waiting for them to exit",
				zap.String("runners", describeRunners(runners)))
		}
		if pace.Wait(ctx) != nil {
			if err != nil {
				return fmt.Errorf("%w: it refuses connections and its runner processes could not be listed: %v", ErrOllamaBusy, err)
			}
			return fmt.Errorf("%w: it refuses connections, but %s still alive, holding GPU memory (was ollama serve killed without its runners?)", ErrOllamaBusy, describeRunners(runners))
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

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unloadEarly sends the unloads without waiting for them: Ollama carries
// each out once the model's running requests have finished.
func (g *GPU) unloadEarly(c *Config) {
	ctx, cancel := context.WithTimeout(g.ctx, c.UnloadTimeout)
	defer cancel()
	models, err := c.Ollama.PS(ctx)
	if err != nil {
		return // the regular unload will report it
	}
	for _, m := range models {
		c.Ollama.Unload(ctx, m.Name)
	}
	if len(models) > 0 {
		g.log().Debug("early unload requested while LLM requests drain", zap.Int("models", len(models)))
	}
}
