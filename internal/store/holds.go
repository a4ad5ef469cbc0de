// Package store keeps what a GPU must not forget across restarts of Caddy
// in Caddy's storage (the global `storage` option; by default Caddy's
// data directory): the external holds, and the models' learned
// footprints.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// Holds keeps one turnstile's holds in Caddy's storage (the global
// `storage` option; by default Caddy's data directory), one record per
// hold under gpu_turnstile/holds/<turnstile>/<id>.json, so that a hold
// survives a restart of Caddy until its ttl runs out.
type Holds struct {
	storage certmagic.Storage
	prefix  string // gpu_turnstile/holds/<turnstile>
}

// timeout bounds each storage operation.
const timeout = 10 * time.Second

// NewHolds returns the store of the holds of the named turnstile.
func NewHolds(storage certmagic.Storage, turnstile string) *Holds {
	return &Holds{storage: storage, prefix: path.Join("gpu_turnstile", "holds", turnstile)}
}

// HoldRecord is a hold's record in the storage.
type HoldRecord struct {
	ID        string    `json:"id"`
	Turnstile string    `json:"turnstile"`
	Owner     string    `json:"owner"`
	TTL       string    `json:"ttl"` // a Go duration: the lease a renewal without a ttl gets
	Since     time.Time `json:"since"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (s *Holds) key(id string) string { return s.prefix + "/" + id + ".json" }

// Save implements gpu.HoldStore.
func (s *Holds) Save(h gpu.SavedHold) error {
	data, err := json.Marshal(HoldRecord{ID: h.ID, Turnstile: path.Base(s.prefix), Owner: h.Owner,
		TTL: h.TTL.String(), Since: h.Since, ExpiresAt: h.ExpiresAt})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.storage.Store(ctx, s.key(h.ID), data)
}

// Delete implements gpu.HoldStore.
func (s *Holds) Delete(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.storage.Delete(ctx, s.key(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Load implements gpu.HoldStore. A record that cannot be read is left
// out (and named in the error only if none can be read).
func (s *Holds) Load() ([]gpu.SavedHold, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	keys, err := s.storage.List(ctx, s.prefix, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []gpu.SavedHold
	var errs []error
	for _, key := range keys {
		if !strings.HasSuffix(key, ".json") {
			continue
		}
		data, err := s.storage.Load(ctx, key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var rec HoldRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", key, err))
			continue
		}
		ttl, err := time.ParseDuration(rec.TTL)
		if err != nil || rec.ID == "" || path.Base(key) != rec.ID+".json" {
			errs = append(errs, fmt.Errorf("%s: not a hold record", key))
			continue
		}
		out = append(out, gpu.SavedHold{ID: rec.ID, Owner: rec.Owner, TTL: ttl, Since: rec.Since, ExpiresAt: rec.ExpiresAt})
	}
	if len(out) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Interface guards
var _ gpu.HoldStore = (*Holds)(nil)
