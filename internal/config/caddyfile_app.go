package config

import (
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// appJSON is the gpu_turnstile app's JSON (the root's App).
type appJSON struct {
	Turnstiles map[string]*Settings `json:"turnstiles,omitempty"`
}

// ParseGlobalApp parses the gpu_turnstile global option
// (ParseGlobalOption) into the app's JSON, adding its turnstile to those
// of the options before it (existing).
func ParseGlobalApp(d *caddyfile.Dispenser, existing any) (any, error) {
	all := map[string]*Settings{}
	if prev, ok := existing.(httpcaddyfile.App); ok {
		var err error
		if all, err = DecodeApp(prev.Value); err != nil {
			return nil, err
		}
	}
	name, s, err := ParseGlobalOption(d, func(name string) bool {
		_, ok := all[name]
		return ok
	})
	if err != nil {
		return nil, err
	}
	all[name] = s
	return httpcaddyfile.App{Name: "gpu_turnstile", Value: caddyconfig.JSON(appJSON{Turnstiles: all}, nil)}, nil
}

// OptionTurnstile returns the settings of the turnstile a handler's
// directive names (name, "" for the default one) from the global
// options, and fails adaptation when they define none.
func OptionTurnstile(h httpcaddyfile.Helper, name string) (*Settings, error) {
	name = OrDefault(name)
	opt, ok := h.Option("gpu_turnstile").(httpcaddyfile.App)
	if !ok {
		return nil, h.Errf("%s: no turnstile named %q: add the global option `gpu_turnstile { %s }`", h.Val(), name, ShorthandBlock("URL"))
	}
	all, err := DecodeApp(opt.Value)
	if err != nil {
		return nil, err
	}
	s, ok := all[name]
	if !ok {
		return nil, h.Errf("no turnstile named %q in the global gpu_turnstile options", name)
	}
	return s, nil
}
