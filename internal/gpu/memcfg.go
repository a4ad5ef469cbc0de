package gpu

import (
	"context"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu/ledger"
)

// MemoryConfig is memory-aware admission (vram_admission): an LLM request
// for a model that no LLM engine has loaded goes to the GPU only when the
// card's free memory covers the model's footprint. Nil in Config: off.
type MemoryConfig struct {
	SMIPath string // nvidia-smi's path, found when the config loads
	Index   int    // the GPU's index (vram_probe nvidia-smi GPU_INDEX)

	// Reserve is kept free for the desktop, a game, a display
	// (vram_reserve).
	Reserve int64
	// Poll is how often the card's memory is read (vram_poll_interval).
	Poll time.Duration
	// StaleAdmits admits requests as if memory-aware admission were off
	// while the reading is stale or missing (vram_stale admit); by
	// default they wait for a fresh reading.
	StaleAdmits bool
	// Models are footprints that override what is learned (model_vram),
	// by model name.
	Models map[string]int64
	// CoResident are the models that may run beside an image job when
	// they fit (co_resident).
	CoResident []string
	// EnginePIDs returns the LLM engines' processes and their
	// descendants (presence.EnginePIDs over their ports), whose memory
	// nvidia-smi shows per process: a footprint is learned from it where
	// the engine does not report one. Nil: learned from engines' reports
	// only.
	EnginePIDs func(ctx context.Context) (map[int32]bool, error)
	// Store keeps the learned footprints across restarts; nil keeps them
	// in memory only.
	Store FootprintStore
}

// FootprintStore keeps the learned footprints of one card (Caddy's
// storage, under gpu_turnstile/footprints/<card>/). Each call is bounded
// by ctx.
type FootprintStore interface {
	// LoadFootprints returns what Save last kept for card ("" when the
	// card's UUID is unknown: the turnstile's name is the key then).
	LoadFootprints(ctx context.Context, card string) ([]byte, error)
	SaveFootprints(ctx context.Context, card string, data []byte) error
}

// rules is what the ledger's rules read of c; MinFree (min_free_vram, of
// the GPU's Config) is left to the caller that needs it.
func (c *MemoryConfig) rules() ledger.Config {
	return ledger.Config{Reserve: c.Reserve, Poll: c.Poll, Models: c.Models, StaleAdmits: c.StaleAdmits,
		Configured: func(model string) (int64, bool) { return configured(c, model) }}
}
