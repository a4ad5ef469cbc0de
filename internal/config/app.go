package config

import (
	"encoding/json"
	"fmt"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// DecodeApp decodes the gpu_turnstile app's JSON strictly into the
// settings of each named turnstile, naming the turnstile and the field of
// any value it refuses.
func DecodeApp(b []byte) (map[string]*Settings, error) {
	var raw struct {
		Turnstiles map[string]json.RawMessage `json:"turnstiles,omitempty"`
	}
	if err := DecodeFields(b, &raw); err != nil {
		return nil, err
	}
	all := make(map[string]*Settings, len(raw.Turnstiles))
	for name, r := range raw.Turnstiles {
		s := new(Settings)
		if err := json.Unmarshal(r, s); err != nil {
			return nil, fmt.Errorf("turnstiles: %q: %w", name, err)
		}
		all[name] = s
	}
	return all, nil
}

// Load validates the settings s of the turnstile named name and locates
// what they name on this host (Validate, Locate); its error names the
// turnstile.
func Load(name string, s *Settings) (*Turnstile, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("gpu_turnstile: turnstile name %q: %s", name, NameRule)
	}
	if s == nil {
		return nil, fmt.Errorf("gpu_turnstile %s: no settings", name)
	}
	c, err := Validate(*s)
	if err == nil {
		err = c.Locate()
	}
	if err != nil {
		return nil, fmt.Errorf("gpu_turnstile %s: %v", name, err)
	}
	return c, nil
}

// HandlerEngine checks a gpu_turnstile handler's engine against the
// config of its turnstile (named ts), and with engine_routes (routes)
// returns the routes it guards.
func (c *Turnstile) HandlerEngine(ts, engine string, routes bool) (route.EngineRoutes, error) {
	if routes {
		if engine == "" {
			return route.EngineRoutes{}, fmt.Errorf("gpu_turnstile: engine_routes needs engine")
		}
		r, ok := c.EngineRoutes(engine)
		if !ok {
			return r, fmt.Errorf("gpu_turnstile: engine %q: turnstile %q has no engine of that name (engines: %s)", engine, ts, c.EngineNameList())
		}
		return r, nil
	}
	if engine != "" && route.ImageEngineNamed(c.GPU.Images, engine) == nil {
		return route.EngineRoutes{}, fmt.Errorf("gpu_turnstile: engine %q: turnstile %q has no image engine of that name", engine, ts)
	}
	return route.EngineRoutes{}, nil
}
