package route

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
)

// Table is what classification knows of the engines' routes: each kind's
// LLM routes, the job routes of each kind of image engine, and the LLM
// kinds that serve an image kind's job routes as LLM work. It is built
// from the registry of kinds (internal/engine/kinds).
type Table struct {
	llm        pathSet           // POST to these cleaned paths is LLM work
	prefixes   []string          // POST under these is LLM work
	anyMethod  []string          // roots loading a model whatever the method
	anyFirst   [256]bool         // the second bytes (lower and upper case) of anyMethod's roots
	anyShort   int               // the length of the shortest anyMethod root
	modelQuery bool              // a request naming ?model= is LLM work
	jobs       map[string]string // job route (cleaned, lower case) → image kind
	serves     map[string]string // LLM kind → the image kind whose job routes it serves
}

// KindRoutes are one kind's routes, as cleaned, lower-case paths.
type KindRoutes struct {
	Kind         string
	LLM          []string // a POST to these is LLM work
	LLMPrefixes  []string // a POST under these (ending in /) is LLM work
	AnyMethod    []string // at or under these roots, any method is LLM work
	ModelQuery   bool     // a request of any method naming ?model= is LLM work
	Jobs         []string // a POST to these starts a job on an image engine
	ServesJobsOf string   // the image kind whose job routes this LLM kind serves
}

// NewTable makes the table of kinds' routes.
func NewTable(kinds []KindRoutes) *Table {
	t := &Table{jobs: map[string]string{}, serves: map[string]string{}}
	for _, k := range kinds {
		for _, p := range k.LLM {
			t.llm.add(p)
		}
		for _, p := range k.LLMPrefixes {
			if !slices.Contains(t.prefixes, p) {
				t.prefixes = append(t.prefixes, p)
			}
		}
		for _, p := range k.AnyMethod {
			if !slices.Contains(t.anyMethod, p) && len(p) > 1 {
				t.anyMethod = append(t.anyMethod, p)
				t.anyFirst[p[1]], t.anyFirst[strings.ToUpper(p[1:2])[0]] = true, true
				if t.anyShort == 0 || len(p) < t.anyShort {
					t.anyShort = len(p)
				}
			}
		}
		t.modelQuery = t.modelQuery || k.ModelQuery
		for _, p := range k.Jobs {
			t.jobs[p] = k.Kind
		}
		if k.ServesJobsOf != "" {
			t.serves[k.Kind] = k.ServesJobsOf
		}
	}
	t.anyFirst['/'] = len(t.anyMethod) > 0
	return t
}

// Class is what a request needs of the GPU.
type Class uint8

const (
	Auto        Class = iota // decide per request
	Passthrough              // no GPU: forwarded untouched
	LLM                      // shares the GPU with other LLM requests
	Image                    // takes the GPU alone until the job ends
)

var classNames = map[string]Class{"auto": Auto, "passthrough": Passthrough, "llm": LLM, "image": Image}

// String is the class as a handler names it.
func (c Class) String() string {
	for n, v := range classNames {
		if v == c {
			return n
		}
	}
	return "unknown"
}

// ParseClass reads a handler's class; "" is Auto.
func ParseClass(s string) (Class, error) {
	if s == "" {
		return Auto, nil
	}
	c, ok := classNames[s]
	if !ok {
		return 0, fmt.Errorf("class %q: want auto, llm, image or passthrough", s)
	}
	return c, nil
}

// Classify decides a request's class from its method and path, as the
// engines would route it. Only POST loads a model or starts a job, but for
// the routes that load on demand whatever the method (AnyMethod,
// ModelQuery). The path is cleaned and lower-cased first, so that no
// spelling of a model route ("//api/chat", "/API/CHAT", "/api/chat/",
// "/v1/../api/chat") slips through as passthrough; a spelling the upstream
// would reject then merely takes the lock for the length of its error
// answer.
func (t *Table) Classify(r *http.Request) Class {
	if r.Method != http.MethodPost {
		return t.classifyOther(r)
	}
	p := CleanPath(r)
	if t.llm.has(p) {
		return LLM
	}
	for _, pre := range t.prefixes {
		if strings.HasPrefix(p, pre) {
			return LLM
		}
	}
	if t.underAnyMethod(p) {
		return LLM
	}
	if t.ImageKind(p) != "" {
		return Image
	}
	return Passthrough
}

// classifyOther classifies a request that is not a POST: passthrough,
// unless it loads a model on demand (an AnyMethod root, a ?model= query).
func (t *Table) classifyOther(r *http.Request) Class {
	if t.modelQuery && r.URL.RawQuery != "" && hasModelQuery(r.URL.RawQuery) {
		return LLM
	}
	// Only a path whose second byte is a root's (either case) or a slash
	// can be under a root: clients resolve dot segments before sending.
	// The common request is passed at once.
	if raw := r.URL.Path; len(raw) < t.anyShort || len(raw) < 2 || !t.anyFirst[raw[1]] {
		return Passthrough
	}
	if t.underAnyMethod(CleanPath(r)) {
		return LLM
	}
	return Passthrough
}

// underAnyMethod reports whether the cleaned path p is at or under a root
// where any method loads a model.
func (t *Table) underAnyMethod(p string) bool {
	for _, root := range t.anyMethod {
		if p == root || (strings.HasPrefix(p, root) && p[len(root)] == '/') {
			return true
		}
	}
	return false
}

// ImageKind is the kind of image engine a POST to the cleaned path p
// starts a job on, or "".
func (t *Table) ImageKind(p string) string { return t.jobs[p] }

// CleanPath is r's path as Classify compares it: cleaned, lower case.
func CleanPath(r *http.Request) string {
	p := r.URL.Path
	if !isCleanLower(p) {
		p = strings.ToLower(path.Clean("/" + p))
	}
	return p
}

// isCleanLower reports whether p is already in the form Classify compares:
// rooted, no upper case, no empty or dot segments, no trailing slash. It
// lets the common case skip allocating.
func isCleanLower(p string) bool {
	if len(p) == 0 || p[0] != '/' || (len(p) > 1 && p[len(p)-1] == '/') {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case 'A' <= c && c <= 'Z':
			return false
		case c == '/' && i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.'):
			return false
		}
	}
	return true
}

// hasModelQuery reports whether the query names a model (?model=M), as a
// llama.cpp router's GET routes read it; the common query-less request
// costs nothing.
func hasModelQuery(q string) bool {
	if !strings.Contains(q, "model=") {
		return false
	}
	v, _ := url.ParseQuery(q)
	return v.Get("model") != ""
}

// ServedAsLLM reports whether the cleaned path p is the job route of an
// image kind that an LLM kind serves as LLM work (llama-swap serves
// A1111's).
func (t *Table) ServedAsLLM(p string) bool {
	k := t.ImageKind(p)
	if k == "" {
		return false
	}
	for _, served := range t.serves {
		if served == k {
			return true
		}
	}
	return false
}

// EngineRoutes is the kind of engine whose routes a handler guards
// (engine_routes); the zero value guards every engine's.
type EngineRoutes struct {
	Kind string // the engine's kind; "" for every kind
	LLM  bool   // whether it is an LLM engine
}

// Restrict makes passthrough what is no work for an engine of e's kind
// (not the zero value): LLM routes on an image engine, another kind's
// image jobs. An LLM kind that serves an image kind's job routes (e.g.
// llama-swap serves A1111's, through stable-diffusion.cpp) does LLM work
// there.
func (t *Table) Restrict(e EngineRoutes, c Class, r *http.Request) Class {
	switch c {
	case LLM:
		if !e.LLM {
			return Passthrough
		}
	case Image:
		switch k := t.ImageKind(CleanPath(r)); {
		case k == e.Kind:
		case e.LLM && k == t.serves[e.Kind]:
			return LLM
		default:
			return Passthrough
		}
	}
	return c
}

// pathSet is a set of paths bucketed by length: a lookup compares the
// few paths of the same length, which on every LLM request costs less
// than hashing the path for a map.
type pathSet struct{ byLen [][]string }

func (s *pathSet) add(p string) {
	for len(s.byLen) <= len(p) {
		s.byLen = append(s.byLen, nil)
	}
	if !slices.Contains(s.byLen[len(p)], p) {
		s.byLen[len(p)] = append(s.byLen[len(p)], p)
	}
}

func (s *pathSet) has(p string) bool {
	if len(p) >= len(s.byLen) {
		return false
	}
	for _, q := range s.byLen[len(p)] {
		if q == p {
			return true
		}
	}
	return false
}
