package store

import (
	"context"
	"path"

	"github.com/caddyserver/certmagic"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// Learned keeps what one turnstile measured of its own work (job, unload,
// free, wake and load times: internal/eta) under
// gpu_turnstile/learned/<turnstile>.json, so that a restart predicts the
// waiters' starts from the first request on.
type Learned struct {
	storage   certmagic.Storage
	turnstile string
}

// NewLearned returns the store of the named turnstile's learned figures.
func NewLearned(storage certmagic.Storage, turnstile string) *Learned {
	return &Learned{storage: storage, turnstile: turnstile}
}

func (s *Learned) key() string {
	return path.Join("gpu_turnstile", "learned", segment(s.turnstile)+".json")
}

// LoadLearned implements gpu.LearnedStore: nothing kept is no error.
func (s *Learned) LoadLearned(ctx context.Context) ([]byte, error) {
	return load(ctx, s.storage, s.key())
}

// SaveLearned implements gpu.LearnedStore.
func (s *Learned) SaveLearned(ctx context.Context, data []byte) error {
	return s.storage.Store(ctx, s.key(), data)
}

// Interface guards
var _ gpu.LearnedStore = (*Learned)(nil)
