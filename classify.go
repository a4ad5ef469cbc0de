package turnstile

import (
	"fmt"
	"net/http"
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

// classify decides a request's class from its method and path, as Ollama
// and ComfyUI would route it. Only POST loads a model or queues a job. The
// path is cleaned and lower-cased first, so that no spelling of a model
// route ("//api/chat", "/API/CHAT", "/api/chat/", "/v1/../api/chat") slips
// through as passthrough; a spelling the upstream would reject then merely
// takes the lock for the length of its error answer.
func classify(r *http.Request) class {
	if r.Method != http.MethodPost {
		return classPassthrough
	}
	p := r.URL.Path
	if !isCleanLower(p) {
		p = strings.ToLower(path.Clean("/" + p))
	}
	switch p {
	case "/api/generate", "/api/chat", "/api/embed", "/api/embeddings":
		return classLLM
	case "/prompt", "/api/prompt":
		return classImage
	}
	if strings.HasPrefix(p, "/v1/") {
		return classLLM
	}
	return classPassthrough
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
