package store

import (
	"context"
	"path"

	"github.com/caddyserver/certmagic"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// Footprints keeps the models' learned footprints of each card, under
// gpu_turnstile/footprints/<card>/footprints.json, card being the card's
// UUID (or the turnstile's name where that is unknown): a restart, or
// another turnstile on the same card, starts from what was learned.
type Footprints struct {
	storage certmagic.Storage
}

// NewFootprints returns the footprint store in storage.
func NewFootprints(storage certmagic.Storage) *Footprints {
	return &Footprints{storage: storage}
}

func footprintKey(card string) string {
	return path.Join("gpu_turnstile", "footprints", segment(card), "footprints.json")
}

// LoadFootprints implements gpu.FootprintStore: nothing kept is no error.
func (s *Footprints) LoadFootprints(ctx context.Context, card string) ([]byte, error) {
	return load(ctx, s.storage, footprintKey(card))
}

// SaveFootprints implements gpu.FootprintStore.
func (s *Footprints) SaveFootprints(ctx context.Context, card string, data []byte) error {
	return s.storage.Store(ctx, footprintKey(card), data)
}

// Interface guards
var _ gpu.FootprintStore = (*Footprints)(nil)
