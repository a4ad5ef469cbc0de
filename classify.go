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
	p := cleanPath(r)
	if r.Method != http.MethodPost {
		if p == "/upstream" || strings.HasPrefix(p, "/upstream/") || hasModelQuery(r.URL.RawQuery) {
			return classLLM
		}
		return classPassthrough
	}
	if llmRoutes[p] || strings.HasPrefix(p, "/v1/") || strings.HasPrefix(p, "/upstream/") {
		return classLLM
	}
	if imageKind(p) != "" {
		return classImage
	}
	return classPassthrough
}

// llmRoutes are the POST routes that run or load a model: Ollama's, and
// llama.cpp's own beside the /v1/ ones (in router mode each autoloads the
// model it names, /tokenize too).
var llmRoutes = map[string]bool{
	"/api/generate": true, "/api/chat": true, "/api/embed": true, "/api/embeddings": true,
	"/completion": true, "/completions": true, "/chat/completions": true, "/responses": true,
	"/embedding": true, "/embeddings": true, "/infill": true, "/rerank": true, "/reranking": true,
	"/tokenize": true, "/detokenize": true, "/apply-template": true, "/audio/transcriptions": true,
	"/models/load": true, "/lora-adapters": true,
}

// imageRoutes are the POST routes that start an image job, by the kind of
// engine that serves them. A1111's answer comes at the job's end; setting
// a checkpoint through /options loads it on the GPU too.
var imageRoutes = map[string]string{
	"/prompt": "comfyui", "/api/prompt": "comfyui",
	"/sdapi/v1/txt2img": "a1111", "/sdapi/v1/img2img": "a1111",
	"/sdapi/v1/extra-single-image": "a1111", "/sdapi/v1/extra-batch-images": "a1111",
	"/sdapi/v1/interrogate": "a1111", "/sdapi/v1/options": "a1111",
}

// imageKind is the kind of image engine a POST to the cleaned path p
// starts a job on, or "".
func imageKind(p string) string { return imageRoutes[p] }

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
