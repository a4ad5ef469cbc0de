package kinds

import (
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/workflow"
)

// Routes are the kinds' routes as classification knows them.
var Routes = func() *route.Table {
	var rs []route.KindRoutes
	for _, k := range All {
		r := k.Routes
		rs = append(rs, route.KindRoutes{Kind: k.Name, LLM: r.LLM, LLMPrefixes: r.LLMPrefixes, AnyMethod: r.AnyMethod,
			ModelQuery: r.ModelQuery, Jobs: r.Jobs, ServesJobsOf: r.ServesJobsOf})
	}
	return route.NewTable(rs)
}()

// Guess is the kind of engine that serves path (cleaned, lower case) by
// its route alone, or nil when the route does not say (OpenAI's /v1/,
// which every LLM engine serves, among them). /api/ routes are told apart
// by name.
func Guess(path string) *engine.Kind {
	for _, k := range All {
		for _, p := range k.Guess.Prefixes {
			if strings.HasPrefix(path, p) {
				return k
			}
		}
	}
	rest, api := strings.CutPrefix(path, "/api/")
	if !api {
		rest = strings.TrimPrefix(path, "/")
	}
	first, _, _ := strings.Cut(rest, "/")
	if api {
		if k := guessBy(func(g engine.Guess) []string { return g.APINames }, first); k != nil {
			return k
		}
	}
	if k := guessBy(func(g engine.Guess) []string { return g.Roots }, first); k != nil {
		return k
	}
	if api {
		for _, k := range All {
			if k.Guess.APIRest {
				return k
			}
		}
	}
	return nil
}

// guessBy is the first kind whose list (of its Guess) holds segment.
func guessBy(list func(engine.Guess) []string, segment string) *engine.Kind {
	for _, k := range All {
		for _, s := range list(k.Guess) {
			if s == segment {
				return k
			}
		}
	}
	return nil
}

// Shape is the error shape of a request to path (cleaned, lower case)
// that an engine of kind serves ("" if not known). An image engine
// answers in its own shape on every route; an OpenAI-compatible prefix
// (/v1/) is OpenAI's; an unknown engine is guessed from the route.
func Shape(path, kind string) engine.Dialect {
	k, known := Named(kind)
	if known && k.Class == engine.ClassImage {
		return k.Dialect
	}
	for _, o := range All {
		for _, p := range o.Routes.LLMPrefixes {
			if strings.HasPrefix(path, p) {
				return engine.DialectOpenAI
			}
		}
	}
	g := Guess(path)
	if g != nil && len(g.Guess.Prefixes) > 0 && hasPrefix(path, g.Guess.Prefixes) {
		return g.Dialect
	}
	if known {
		return k.Dialect
	}
	if g != nil {
		return g.Dialect
	}
	return engine.DialectOllama
}

// hasPrefix reports whether path is under one of prefixes.
func hasPrefix(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// JobID reads a queued job's id from the start of the answer of an engine
// of kind; nil for a synchronous engine or an unknown kind.
func JobID(kind string) func(answer []byte) (string, bool) {
	if k, ok := Named(kind); ok {
		return k.JobID
	}
	return nil
}

// Signature is the key under which the memory peak of a job of an engine
// of kind to path (cleaned, lower case) is learned; "" if the job cannot
// be read.
func Signature(kind, path string, body []byte) string {
	k, ok := Named(kind)
	if !ok || k.Signature == nil {
		return ""
	}
	return workflow.Key(k.Name, k.Signature(path, body))
}
