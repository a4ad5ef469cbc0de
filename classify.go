package turnstile

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
)

// class is what a request needs of the GPU.
type class uint8

const (
	classAuto        class = iota // decide per request
	classPassthrough              // no GPU: forwarded untouched
	classLLM                      // shares the GPU with other LLM requests
	classImage                    // takes the GPU alone until the job ends
)

var classNames = map[string]class{"auto": classAuto, "passthrough": classPassthrough, "llm": classLLM, "image": classImage}

func (c class) String() string {
	for n, v := range classNames {
		if v == c {
			return n
		}
	}
	return "unknown"
}

func parseClass(s string) (class, error) {
	if s == "" {
		return classAuto, nil
	}
	c, ok := classNames[s]
	if !ok {
		return 0, fmt.Errorf("class %q: want auto, llm, image or passthrough", s)
	}
	return c, nil
}

// classify decides a request's class from its method and path, as the
// engines would route it. Only POST loads a model or starts a job, but for
// two routes that load on demand whatever the method: llama-swap's
// /upstream/..., and a llama.cpp router's GET routes that carry ?model=.
// The path is cleaned and lower-cased first, so that no spelling of a
// model route ("//api/chat", "/API/CHAT", "/api/chat/", "/v1/../api/chat")
// slips through as passthrough; a spelling the upstream would reject then
// merely takes the lock for the length of its error answer.
func classify(r *http.Request) class {
	if r.Method != http.MethodPost {
		return classifyOther(r)
	}
	p := cleanPath(r)
	switch p {
	case "/api/generate", "/api/chat", "/api/embed", "/api/embeddings",
		"/completion", "/completions", "/chat/completions", "/responses",
		"/embedding", "/embeddings", "/infill", "/rerank", "/reranking",
		"/tokenize", "/detokenize", "/apply-template", "/audio/transcriptions",
		"/models/load", "/lora-adapters":
		// Ollama's, and llama.cpp's own beside the /v1/ ones (in router
		// mode each autoloads the model it names, /tokenize too).
		return classLLM
	}
	// /v/ is llama-swap's versionless form of its /v1/ routes.
	if strings.HasPrefix(p, "/v1/") || strings.HasPrefix(p, "/v/") || strings.HasPrefix(p, "/upstream/") || p == "/audioapi/v1/tasks/run" {
		return classLLM
	}
	if imageKind(p) != "" {
		return classImage
	}
	return classPassthrough
}

// classifyOther classifies a request that is not a POST: passthrough,
// unless it loads a model on demand (llama-swap's /upstream/..., a
// llama.cpp router's GET that names a model).
func classifyOther(r *http.Request) class {
	if r.URL.RawQuery != "" && hasModelQuery(r.URL.RawQuery) {
		return classLLM
	}
	// Only a path that starts /u, /U or // can be /upstream/...: clients
	// resolve dot segments before sending, and llama-swap's router does
	// not. The common request is passed at once.
	if raw := r.URL.Path; len(raw) < 9 || (raw[1] != 'u' && raw[1] != 'U' && raw[1] != '/') {
		return classPassthrough
	}
	if p := cleanPath(r); p == "/upstream" || strings.HasPrefix(p, "/upstream/") {
		return classLLM
	}
	return classPassthrough
}

// imageKind is the kind of image engine a POST to the cleaned path p
// starts a job on, or "". A1111's answer comes at the job's end; setting a
// checkpoint through /options loads it on the GPU too.
func imageKind(p string) string {
	switch p {
	case "/prompt", "/api/prompt":
		return "comfyui"
	case "/sdapi/v1/txt2img", "/sdapi/v1/img2img", "/sdapi/v1/extra-single-image",
		"/sdapi/v1/extra-batch-images", "/sdapi/v1/interrogate", "/sdapi/v1/options",
		"/sdapi/v1/reload-checkpoint", "/sdapi/v1/create/embedding", "/sdapi/v1/create/hypernetwork",
		"/sdapi/v1/train/embedding", "/sdapi/v1/train/hypernetwork":
		return "a1111"
	}
	return ""
}

// cleanPath is r's path as classify compares it.
func cleanPath(r *http.Request) string {
	p := r.URL.Path
	if !isCleanLower(p) {
		p = strings.ToLower(path.Clean("/" + p))
	}
	return p
}

// isCleanLower reports whether p is already in the form classify compares:
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

// engineRoutes is the kind of engine whose routes a handler guards
// (engine_routes); the zero value guards every engine's.
type engineRoutes struct {
	kind string // the engine's kind; "" for every kind
	llm  bool   // whether it is an LLM engine
}

// routesOf is the engineRoutes of the engine named name.
func routesOf(c *config, name string) (engineRoutes, bool) {
	for _, e := range c.GPU.LLMs {
		if e.Name() == name {
			return engineRoutes{kind: e.Kind(), llm: true}, true
		}
	}
	for _, e := range c.GPU.Images {
		if e.Name() == name {
			return engineRoutes{kind: e.Kind()}, true
		}
	}
	return engineRoutes{}, false
}

// restrict makes passthrough what is no work for an engine of e's kind
// (not the zero value): LLM routes on an image engine, another kind's
// image jobs. llama-swap serves A1111's routes itself
// (stable-diffusion.cpp): LLM work there.
func (e engineRoutes) restrict(c class, r *http.Request) class {
	switch c {
	case classLLM:
		if !e.llm {
			return classPassthrough
		}
	case classImage:
		switch k := imageKind(cleanPath(r)); {
		case k == e.kind:
		case e.kind == "llamaswap" && k == "a1111":
			return classLLM
		default:
			return classPassthrough
		}
	}
	return c
}
