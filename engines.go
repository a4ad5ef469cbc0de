package turnstile

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm"
)

// EngineSettings configure one engine that shares the turnstile's GPU.
type EngineSettings struct {
	// The engine's kind. LLM engines: "ollama", "llamacpp" (llama.cpp's
	// llama-server in router mode), "llamaswap" or "vllm". Image
	// engines: "comfyui" or "a1111" (AUTOMATIC1111 or Forge).
	Kind string `json:"kind"`

	// The engine's URL, e.g. http://127.0.0.1:8080.
	URL string `json:"url"`

	// The engine's name in the turnstile: unique among its engines, used
	// by the status, the metrics' engine label and a handler's `engine`.
	// Default: its kind, so two engines of one kind need a name.
	Name string `json:"name,omitempty"`
}

// engineKinds builds the adapter of each kind of engine, by class.
var engineKinds = map[string]map[string]func(name, url string, c *config) (gpu.Engine, error){
	"llm": {
		"ollama": func(name, url string, c *config) (gpu.Engine, error) {
			oc, err := ollama.NewClient(url, nil)
			if err != nil {
				return nil, err
			}
			return gpu.NewOllama(name, oc, c.gpu.UnloadPoll), nil
		},
		"llamacpp": func(name, url string, c *config) (gpu.Engine, error) {
			lc, err := llamacpp.NewClient(url, nil)
			if err != nil {
				return nil, err
			}
			return gpu.NewLlamaCpp(name, lc, c.gpu.UnloadPoll), nil
		},
		"llamaswap": func(name, url string, _ *config) (gpu.Engine, error) {
			sc, err := llamaswap.NewClient(url, nil)
			if err != nil {
				return nil, err
			}
			return gpu.NewLlamaSwap(name, sc), nil
		},
		"vllm": func(name, url string, c *config) (gpu.Engine, error) {
			vc, err := vllm.NewClient(url, nil)
			if err != nil {
				return nil, err
			}
			return gpu.NewVLLM(name, vc, c.gpu.UnloadPoll), nil
		},
	},
	"image": {
		"comfyui": func(name, url string, c *config) (gpu.Engine, error) {
			cc, err := comfy.NewClient(url, nil)
			if err != nil {
				return nil, err
			}
			if c.comfy == nil {
				c.comfy, c.comfyName = cc, name
			}
			return gpu.NewComfy(name, cc, gpu.ComfyOptions{HistoryPoll: c.historyPoll, FreePoll: c.gpu.UnloadPoll,
				BackoffInitial: c.gpu.BackoffInitial, BackoffMax: c.gpu.BackoffMax}), nil
		},
		"a1111": func(name, url string, c *config) (gpu.Engine, error) {
			ac, err := a1111.NewClient(url, nil)
			if err != nil {
				return nil, err
			}
			return gpu.NewA1111(name, ac, c.historyPoll, c.gpu.UnloadPoll), nil
		},
	},
}

// kindNames lists a class's kinds for messages.
func kindNames(class string) string {
	var ks []string
	for k := range engineKinds[class] {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// engineList is a turnstile's engines of one class as configured: the
// shorthand (`ollama URL`, `comfy URL`) first, then the `llm`/`image`
// entries.
func engineList(shorthand, kind string, more []EngineSettings) []EngineSettings {
	var list []EngineSettings
	if shorthand != "" {
		list = append(list, EngineSettings{Kind: kind, URL: shorthand})
	}
	return append(list, more...)
}

// validateEngines builds every engine's client and adapter. Errors name
// the option as the Caddyfile spells it.
func validateEngines(s Settings, c *config) error {
	llms := engineList(s.Ollama, "ollama", s.LLM)
	images := engineList(s.Comfy, "comfyui", s.Image)
	if len(llms)+len(images) == 0 {
		return fmt.Errorf("no engine: at least one of ollama and comfy (or an llm or image engine) must be set")
	}
	names := map[string]string{}
	for _, cl := range []struct {
		class string
		list  []EngineSettings
	}{{"llm", llms}, {"image", images}} {
		for i, es := range cl.list {
			e, err := buildEngine(cl.class, es, c)
			if err != nil {
				return &engineError{class: cl.class, index: i, err: err}
			}
			where := cl.class + " " + es.Kind + " " + gpu.RedactURL(es.URL)
			if prev, dup := names[e.Name()]; dup {
				return &engineError{class: cl.class, index: i,
					err: fmt.Errorf("%s: another engine (%s) is already named %q: give one of them a name", where, prev, e.Name())}
			}
			names[e.Name()] = where
			switch e := e.(type) {
			case gpu.LLMEngine:
				c.gpu.LLMs = append(c.gpu.LLMs, e)
			case gpu.ImageEngine:
				c.gpu.Images = append(c.gpu.Images, e)
			}
		}
	}
	return nil
}

// buildEngine makes one engine of class from its settings.
func buildEngine(class string, es EngineSettings, c *config) (gpu.Engine, error) {
	build := engineKinds[class][es.Kind]
	if build == nil {
		return nil, fmt.Errorf("%s: kind %q: want one of %s", class, es.Kind, kindNames(class))
	}
	if es.URL == "" {
		return nil, fmt.Errorf("%s %s: no URL", class, es.Kind)
	}
	if err := jsonhttp.CheckURL(es.URL); err != nil {
		return nil, fmt.Errorf("%s %s: URL %q: %v", class, es.Kind, gpu.RedactURL(es.URL), err)
	}
	name := es.Name
	if name == "" {
		name = es.Kind
	}
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("%s %s: name %q: %s", class, es.Kind, name, nameRule)
	}
	e, err := build(name, es.URL, c)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", class, es.Kind, err)
	}
	return e, nil
}

// engineSummary describes each engine for the start-up log:
// "class kind name url".
func engineSummary(c *config) []string {
	var out []string
	for _, e := range c.gpu.LLMs {
		out = append(out, "llm "+e.Kind()+" "+e.Name()+" "+gpu.RedactURL(e.URL()))
	}
	for _, e := range c.gpu.Images {
		out = append(out, "image "+e.Kind()+" "+e.Name()+" "+gpu.RedactURL(e.URL()))
	}
	return out
}

// engineError is an error in one engine's settings: the index-th of its
// class, in the order engineList gives.
type engineError struct {
	class string // llm or image
	index int
	err   error
}

func (e *engineError) Error() string { return e.err.Error() }
func (e *engineError) Unwrap() error { return e.err }

// shorthand is the shorthand option's URL of class (ollama for llm, comfy
// for image).
func (s *Settings) shorthand(class string) string {
	if class == "llm" {
		return s.Ollama
	}
	return s.Comfy
}

// hasImageEngine reports whether the settings have an image engine named
// name.
func (s *Settings) hasImageEngine(name string) bool {
	for _, es := range engineList(s.Comfy, "comfyui", s.Image) {
		if es.Name == name || (es.Name == "" && es.Kind == name) {
			return true
		}
	}
	return false
}

// engineNamed finds the engine named name in the settings, with the
// option that defines it (as the Caddyfile spells it: `ollama`, `llm
// vllm`...) and its class.
func (s *Settings) engineNamed(name string) (es EngineSettings, opt, class string, ok bool) {
	for _, cl := range []struct {
		class, shorthand, kind, url string
		more                        []EngineSettings
	}{{"llm", "ollama", "ollama", s.Ollama, s.LLM}, {"image", "comfy", "comfyui", s.Comfy, s.Image}} {
		if cl.url != "" && name == cl.kind {
			return EngineSettings{Kind: cl.kind, URL: cl.url}, cl.shorthand, cl.class, true
		}
		for _, es := range cl.more {
			if es.Name == name || (es.Name == "" && es.Kind == name) {
				return es, cl.class + " " + es.Kind, cl.class, true
			}
		}
	}
	return EngineSettings{}, "", "", false
}

// engineNameList lists the settings' engines by name, for messages.
func (s *Settings) engineNameList() string {
	var names []string
	for _, es := range append(engineList(s.Ollama, "ollama", s.LLM), engineList(s.Comfy, "comfyui", s.Image)...) {
		name := es.Name
		if name == "" {
			name = es.Kind
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
