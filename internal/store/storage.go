package store

import (
	"context"
	"errors"
	"io/fs"
	"strings"

	"github.com/caddyserver/certmagic"
)

// segment is name as one segment of a storage key: names have no slash
// (the turnstile-name rule, a card's UUID), and one that did would not
// leave its folder.
func segment(name string) string { return strings.ReplaceAll(name, "/", "_") }

// load reads key from storage: nothing kept is no error.
func load(ctx context.Context, storage certmagic.Storage, key string) ([]byte, error) {
	data, err := storage.Load(ctx, key)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}
