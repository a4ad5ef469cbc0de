package config

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// validateEngines builds every engine's client and adapter. Errors name
// the option as the Caddyfile spells it.
func validateEngines(s Settings, c *Turnstile) error {
	if len(s.engines(LLM))+len(s.engines(Image)) == 0 {
		return fmt.Errorf("no engine: at least one of %s (or an llm or image engine) must be set", strings.Join(kinds.Shorthands(), " and "))
	}
	names := map[string]string{}
	for _, class := range []string{LLM, Image} {
		for i, es := range s.engines(class) {
			e, err := buildEngine(class, es, c)
			if err != nil {
				return &EngineError{Class: class, Index: i, err: err}
			}
			where := class + " " + es.Kind + " " + gpu.RedactURL(es.URL)
			if prev, dup := names[e.Name()]; dup {
				return &EngineError{Class: class, Index: i,
					err: fmt.Errorf("%s: another engine (%s) is already named %q: give one of them a name", where, prev, e.Name())}
			}
			names[e.Name()] = where
			switch e := e.(type) {
			case gpu.LLMEngine:
				c.GPU.LLMs = append(c.GPU.LLMs, e)
			case gpu.ImageEngine:
				c.GPU.Images = append(c.GPU.Images, e)
			}
		}
	}
	return nil
}

// buildEngine makes one engine of class from its settings.
func buildEngine(class string, es EngineSettings, c *Turnstile) (gpu.Engine, error) {
	k, ok := kinds.Named(es.Kind)
	if !ok || string(k.Class) != class {
		return nil, fmt.Errorf("%s: kind %q: want one of %s", class, es.Kind, KindNames(class))
	}
	if es.URL == "" {
		return nil, fmt.Errorf("%s %s: no URL", class, es.Kind)
	}
	if err := jsonhttp.CheckURL(es.URL); err != nil {
		return nil, fmt.Errorf("%s %s: URL %q: %v", class, es.Kind, gpu.RedactURL(es.URL), err)
	}
	name := es.name()
	if !ValidName(name) {
		return nil, fmt.Errorf("%s %s: name %q: %s", class, es.Kind, name, NameRule)
	}
	o := c.engineOptions()
	h, err := engineHeader(es.Headers)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", class, es.Kind, err)
	}
	o.Header = h
	e, err := k.New(name, es.URL, o)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", class, es.Kind, err)
	}
	return e, nil
}

// engineSummary describes each engine for the start-up log:
// "class kind name url".
func (c *Turnstile) EngineSummary() []string {
	var out []string
	for _, e := range c.GPU.LLMs {
		out = append(out, "llm "+e.Kind()+" "+e.Name()+" "+gpu.RedactURL(e.URL()))
	}
	for _, e := range c.GPU.Images {
		out = append(out, "image "+e.Kind()+" "+e.Name()+" "+gpu.RedactURL(e.URL()))
	}
	return out
}

// EngineError is an error in one engine's settings: the index-th of its
// class, in the order engineList gives.
type EngineError struct {
	Class string // llm or image
	Index int
	err   error
}

func (e *EngineError) Error() string { return e.err.Error() }
func (e *EngineError) Unwrap() error { return e.err }

// Shorthand is the URL of class's shorthand option (kinds.Shorthand), ""
// if unset or if the class has none.
func (s *Settings) Shorthand(class string) string {
	return s.Shorthands[shorthandOption(class)]
}

// engines are the engines of class as configured: the shorthand's first,
// then the llm or image entries.
func (s *Settings) engines(class string) []EngineSettings {
	more := s.LLM
	if class == Image {
		more = s.Image
	}
	var list []EngineSettings
	if url := s.Shorthand(class); url != "" {
		k, _ := kinds.Shorthand(engine.Class(class))
		list = append(list, EngineSettings{Kind: k.Name, URL: url})
	}
	return append(list, more...)
}

// name is the engine's name: its kind unless it names itself.
func (es EngineSettings) name() string {
	if es.Name == "" {
		return es.Kind
	}
	return es.Name
}

// HasImageEngine reports whether the settings have an image engine named
// name.
func (s *Settings) HasImageEngine(name string) bool {
	_, _, class, ok := s.EngineNamed(name)
	return ok && class == Image
}

// EngineNamed finds the engine named name in the settings, with the
// option that defines it (as the Caddyfile spells it: a shorthand, or
// `llm KIND`...) and its class.
func (s *Settings) EngineNamed(name string) (es EngineSettings, opt, class string, ok bool) {
	for _, class := range []string{LLM, Image} {
		for i, es := range s.engines(class) {
			switch {
			case es.name() != name:
			case i == 0 && s.Shorthand(class) != "":
				return es, shorthandOption(class), class, true
			default:
				return es, class + " " + es.Kind, class, true
			}
		}
	}
	return EngineSettings{}, "", "", false
}

// EngineNameList lists the settings' engines by name, for messages.
func (s *Settings) EngineNameList() string {
	var names []string
	for _, es := range append(s.engines(LLM), s.engines(Image)...) {
		names = append(names, es.name())
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// EngineRoutes are the routes of the engine named name (engine_routes).
func (c *Turnstile) EngineRoutes(name string) (route.EngineRoutes, bool) {
	for _, e := range c.GPU.LLMs {
		if e.Name() == name {
			return route.EngineRoutes{Kind: e.Kind(), LLM: true}, true
		}
	}
	for _, e := range c.GPU.Images {
		if e.Name() == name {
			return route.EngineRoutes{Kind: e.Kind()}, true
		}
	}
	return route.EngineRoutes{}, false
}
