package kinds

import (
	"slices"
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
)

// Named is the kind named name.
func Named(name string) (*engine.Kind, bool) {
	for _, k := range All {
		if k.Name == name {
			return k, true
		}
	}
	return nil, false
}

// Is reports whether name is a kind of class.
func Is(class engine.Class, name string) bool {
	k, ok := Named(name)
	return ok && k.Class == class
}

// Of lists the kinds of class, in the registry's order.
func Of(class engine.Class) []*engine.Kind {
	var ks []*engine.Kind
	for _, k := range All {
		if k.Class == class {
			ks = append(ks, k)
		}
	}
	return ks
}

// Names lists the names of the kinds of class, sorted, for messages.
func Names(class engine.Class) string {
	var ns []string
	for _, k := range Of(class) {
		ns = append(ns, k.Name)
	}
	slices.Sort(ns)
	return strings.Join(ns, ", ")
}

// WarmNames lists the kinds that can warm, for messages.
func WarmNames() string {
	var ns []string
	for _, k := range All {
		if k.Warms {
			ns = append(ns, k.Name)
		}
	}
	return strings.Join(ns, " or ")
}

// Shorthand is the kind of class with a shorthand option, if any.
func Shorthand(class engine.Class) (*engine.Kind, bool) {
	for _, k := range Of(class) {
		if k.Shorthand != "" {
			return k, true
		}
	}
	return nil, false
}

// Shorthands lists the shorthand options, in the registry's order.
func Shorthands() []string {
	var os []string
	for _, k := range All {
		if k.Shorthand != "" {
			os = append(os, k.Shorthand)
		}
	}
	return os
}

// ByProbe is the kind whose engines read the card for vram_probe name.
func ByProbe(name string) (*engine.Kind, bool) {
	for _, k := range All {
		if k.Probe != "" && k.Probe == name {
			return k, true
		}
	}
	return nil, false
}

// Probes lists vram_probe's engine probes, in the registry's order.
func Probes() []string {
	var ps []string
	for _, k := range All {
		if k.Probe != "" {
			ps = append(ps, k.Probe)
		}
	}
	return ps
}
