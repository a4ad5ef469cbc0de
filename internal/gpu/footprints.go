package gpu

import (
	"context"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu/ledger"
)

// FootprintStatus is one footprint as the status shows it.
type FootprintStatus struct {
	Engine string `json:"engine"`
	Model  string `json:"model"`
	Bytes  int64  `json:"bytes"`
	Source string `json:"source"` // learned or configured
	// Alone is true once the engine ran out of memory for the model: it
	// is admitted only when the card is free for it alone.
	Alone bool `json:"alone,omitempty"`
}

// configured returns the model_vram of model (a key of modelKey), which
// the config may spell with or without ":latest".
func configured(c *MemoryConfig, model string) (int64, bool) {
	if b, ok := c.Models[model]; ok {
		return b, true
	}
	b, ok := c.Models[model+":latest"]
	return b, ok
}

// loadFootprints reads the card's footprints from the store, once.
func (g *GPU) loadFootprints(ctx context.Context, c *MemoryConfig, card string) {
	g.mu.Lock()
	done := g.mem.loadedFps
	g.mem.loadedFps = true
	g.mu.Unlock()
	if done || c.Store == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	data, err := c.Store.LoadFootprints(sctx, g.cardKey(card))
	if err != nil || len(data) == 0 {
		if err != nil {
			g.log().Warn("footprints not read from storage", zap.Error(err))
		}
		return
	}
	fps, err := ledger.Decode(data)
	if err != nil {
		g.log().Warn("footprints in storage are unreadable; they are learned again", zap.Error(err))
		return
	}
	g.update(func() { g.mem.ledger.Restore(fps) })
	g.log().Info("footprints read from storage", zap.Int("models", len(fps)))
}

// saveFootprints writes the learned footprints to the store.
func (g *GPU) saveFootprints(ctx context.Context, c *MemoryConfig, card string, data []byte) {
	if c.Store == nil {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	if err := c.Store.SaveFootprints(sctx, g.cardKey(card), data); err != nil {
		g.log().Warn("footprints not saved to storage", zap.Error(err))
	}
}
