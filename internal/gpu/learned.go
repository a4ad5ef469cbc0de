package gpu

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/eta"
)

// LearnedStore keeps what a turnstile measured of its own work (the
// figures its predictions rest on, internal/eta) across restarts. Its
// methods are called without the GPU's locks held; an error is logged,
// and the figures go on in memory.
type LearnedStore interface {
	// LoadLearned returns what SaveLearned wrote last; nothing kept is
	// no error (nil, nil).
	LoadLearned(ctx context.Context) ([]byte, error)
	SaveLearned(ctx context.Context, data []byte) error
}

// Learned returns a copy of what this turnstile measured, the figures
// its predictions rest on.
func (g *GPU) Learned() *eta.Learned {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.learned.Clone()
}

// learn records a measure with f, then saves the figures.
func (g *GPU) learn(f func(*eta.Learned)) {
	g.update(func() { f(&g.learned) })
	if c := g.cfg(); c != nil && c.LearnedStore != nil {
		g.spawn(func() { g.saveLearned(c.LearnedStore) })
	}
}

// learnStep records an engine's timed step.
func (g *GPU) learnStep(engine string, s eta.Step, took time.Duration) {
	g.learn(func(l *eta.Learned) { l.AddStep(engine, s, took) })
}

// loadLearned reads the figures from c's store, once, before anything
// is measured: the first config's store is the one they come from.
func (g *GPU) loadLearned(c *Config) {
	if c.LearnedStore == nil {
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, restoreTimeout)
	defer cancel()
	data, err := c.LearnedStore.LoadLearned(ctx)
	if err != nil || len(data) == 0 {
		if err != nil {
			g.log().Warn("learned figures not read from storage", zap.Error(err))
		}
		return
	}
	l, err := eta.Decode(data)
	if err != nil {
		g.log().Warn("learned figures in storage are unreadable; they are measured again", zap.Error(err))
		return
	}
	g.update(func() { g.learned = *l })
}

// saveLearned writes the figures as they are now: saves run one at a
// time, each with the newest figures, so an older one never lands last.
func (g *GPU) saveLearned(s LearnedStore) {
	g.learnSave.Lock()
	defer g.learnSave.Unlock()
	g.mu.Lock()
	data := g.learned.Encode()
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(g.ctx, restoreTimeout)
	defer cancel()
	if err := s.SaveLearned(ctx, data); err != nil && g.ctx.Err() == nil {
		g.log().Warn("learned figures not saved to storage", zap.Error(err))
	}
}
