package route

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// Table is what classification knows of the engines' routes: the job
// routes of each kind of image engine, and the LLM kinds that serve an
// image kind's job routes as LLM work. internal/config builds it from its
// registry of kinds.
type Table struct {
	jobs   map[string]string // job route (cleaned, lower case) → image kind
	serves map[string]string // LLM kind → the image kind whose job routes it serves
}

// NewTable makes the table of job routes jobs (cleaned, lower-case path →
// image kind) and serves (LLM kind → image kind whose job routes it
// serves as LLM work).
func NewTable(jobs, serves map[string]string) *Table {
	return &Table{jobs: jobs, serves: serves}
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
// two routes that load on demand whatever the method: llama-swap's
// /upstream/..., and a llama.cpp router's GET routes that carry ?model=.
// The path is cleaned and lower-cased first, so that no spelling of a
// model route ("//api/chat", "/API/CHAT", "/api/chat/", "/v1/../api/chat")
// slips through as passthrough; a spelling the upstream would reject then
// merely takes the lock for the length of its error answer.
func (t *Table) Classify(r *http.Request) Class {
	if r.Method != http.MethodPost {
		return classifyOther(r)
	}
	p := CleanPath(r)
	switch p {
	case "/api/generate", "/api/chat", "/api/embed", "/api/embeddings",
		"/completion", "/completions", "/chat/completions", "/responses",
		"/embedding", "/embeddings", "/infill", "/rerank", "/reranking",
		"/tokenize", "/detokenize", "/apply-template", "/audio/transcriptions",
		"/models/load", "/lora-adapters":
		// Ollama's, and llama.cpp's own beside the /v1/ ones (in router
		// mode each autoloads the model it names, /tokenize too).
		return LLM
	}
	// /v/ is llama-swap's versionless form of its /v1/ routes.
	if strings.HasPrefix(p, "/v1/") || strings.HasPrefix(p, "/v/") || strings.HasPrefix(p, "/upstream/") || p == "/audioapi/v1/tasks/run" {
		return LLM
	}
	if t.ImageKind(p) != "" {
		return Image
	}
	return Passthrough
}

// classifyOther classifies a request that is not a POST: passthrough,
// unless it loads a model on demand (llama-swap's /upstream/..., a
// llama.cpp router's GET that names a model).
func classifyOther(r *http.Request) Class {
	if r.URL.RawQuery != "" && hasModelQuery(r.URL.RawQuery) {
		return LLM
	}
	// Only a path that starts /u, /U or // can be /upstream/...: clients
	// resolve dot segments before sending, and llama-swap's router does
	// not. The common request is passed at once.
	if raw := r.URL.Path; len(raw) < 9 || (raw[1] != 'u' && raw[1] != 'U' && raw[1] != '/') {
		return Passthrough
	}
	if p := CleanPath(r); p == "/upstream" || strings.HasPrefix(p, "/upstream/") {
		return LLM
	}
	return Passthrough
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
