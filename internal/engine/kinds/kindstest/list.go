package kindstest

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
)

// Kinds are the kinds of class that have a fake, in the registry's order:
// what a benchmark or the demo may start.
func Kinds(class engine.Class) []*engine.Kind {
	var ks []*engine.Kind
	for _, k := range kinds.Of(class) {
		if _, ok := Fakes[k.Name]; ok {
			ks = append(ks, k)
		}
	}
	return ks
}

// Names are the names of Kinds(class).
func Names(class engine.Class) []string {
	var ns []string
	for _, k := range Kinds(class) {
		ns = append(ns, k.Name)
	}
	return ns
}
