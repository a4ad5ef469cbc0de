package ollama

import (
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
)

// Kind describes Ollama to the turnstile.
var Kind = &engine.Kind{
	Name: "ollama", Title: "Ollama", Class: engine.ClassLLM,
	New: func(name, url string, o engine.Options) (engine.Engine, error) {
		c, err := ollama.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		c.SetHeader(o.Header)
		return New(name, c, o.UnloadPoll), nil
	},
	Shorthand: "ollama", Label: "ollama",
	Warms: true,
	Routes: engine.Routes{
		LLM:         []string{"/api/generate", "/api/chat", "/api/embed", "/api/embeddings"},
		LLMPrefixes: []string{"/v1/"},
	},
	Guess: engine.Guess{
		APINames: []string{"generate", "chat", "embed", "embeddings", "tags", "show", "ps", "version",
			"pull", "push", "create", "copy", "delete", "blobs"},
		APIRest: true,
	},
	Dialect: engine.DialectOllama,
	// "model requires more system memory ... than is available", and
	// "cudaMalloc failed: out of memory" from its runner.
	OOM: []string{"out of memory", "requires more system memory"},
	// It lists "llama3.2" as "llama3.2:latest", which is the same model.
	ModelKey: func(name string) string { return strings.TrimSuffix(name, ":latest") },
	Servers:  servers,
}
