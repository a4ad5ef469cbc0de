package config

import (
	"slices"
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
)

// The classes of engines, as the settings and the Caddyfile name them.
const (
	LLM   = string(engine.ClassLLM)   // shares the GPU with the other LLM engines
	Image = string(engine.ClassImage) // takes the GPU alone for a job
)

// Routes are the engines' routes as classification knows them (package
// route), from the registry of kinds.
var Routes = kinds.Routes

// IsKind reports whether name is a kind of engine of class.
func IsKind(class, name string) bool { return kinds.Is(engine.Class(class), name) }

// KindNames lists the kinds of class, sorted, for messages.
func KindNames(class string) string { return kinds.Names(engine.Class(class)) }

// shorthandOption is the option that gives class's first engine by its
// URL alone (`OPTION URL` is `CLASS KIND URL`), "" if none.
func shorthandOption(class string) string {
	if k, ok := kinds.Shorthand(engine.Class(class)); ok {
		return k.Shorthand
	}
	return ""
}

// isShorthand reports whether opt is a shorthand option.
func isShorthand(opt string) bool { return slices.Contains(kinds.Shorthands(), opt) }

// engineOptions are the timings the engines' adapters are built with
// (filled in before the engines are built).
func (c *Turnstile) engineOptions() engine.Options {
	return engine.Options{UnloadPoll: c.GPU.UnloadPoll, HistoryPoll: c.HistoryPoll,
		BackoffInitial: c.GPU.BackoffInitial, BackoffMax: c.GPU.BackoffMax}
}

// ShorthandBlock is the shorthand options each followed by arg, as a
// global gpu_turnstile block gives them, for messages ("OPTION URL
// OPTION URL").
func ShorthandBlock(arg string) string {
	var parts []string
	for _, o := range kinds.Shorthands() {
		parts = append(parts, o+" "+arg)
	}
	return strings.Join(parts, " ")
}
