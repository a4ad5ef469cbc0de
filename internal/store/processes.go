package store

import (
	"context"
	"path"

	"github.com/caddyserver/certmagic"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// Processes keeps what is known of one turnstile's LLM engines'
// processes, under gpu_turnstile/processes/<turnstile>/<engine>.json: an
// orphaned model server left by an engine that died is still known after
// Caddy restarts.
type Processes struct {
	storage   certmagic.Storage
	turnstile string
}

// NewProcesses returns the process store of the named turnstile.
func NewProcesses(storage certmagic.Storage, turnstile string) *Processes {
	return &Processes{storage: storage, turnstile: turnstile}
}

func (s *Processes) key(engine string) string {
	return path.Join("gpu_turnstile", "processes", segment(s.turnstile), segment(engine)+".json")
}

// LoadProcesses implements gpu.ProcessStore: nothing kept is no error.
func (s *Processes) LoadProcesses(ctx context.Context, engine string) ([]byte, error) {
	return load(ctx, s.storage, s.key(engine))
}

// SaveProcesses implements gpu.ProcessStore.
func (s *Processes) SaveProcesses(ctx context.Context, engine string, data []byte) error {
	return s.storage.Store(ctx, s.key(engine), data)
}

// Interface guards
var _ gpu.ProcessStore = (*Processes)(nil)
