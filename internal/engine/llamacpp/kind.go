package llamacpp

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp"
)

// Kind describes llama.cpp's llama-server in router mode to the turnstile.
var Kind = &engine.Kind{
	Name: "llamacpp", Title: "llama.cpp", Class: engine.ClassLLM,
	New: func(name, url string, o engine.Options) (engine.Engine, error) {
		c, err := llamacpp.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		c.SetHeader(o.Header)
		return New(name, c, o.UnloadPoll), nil
	},
	Warms: true,
	Routes: engine.Routes{
		// Its own routes beside the /v1/ ones: in router mode each
		// autoloads the model it names, /tokenize too.
		LLM: []string{"/completion", "/completions", "/chat/completions", "/responses",
			"/embedding", "/embeddings", "/infill", "/rerank", "/reranking",
			"/tokenize", "/detokenize", "/apply-template", "/audio/transcriptions",
			"/models/load", "/lora-adapters"},
		LLMPrefixes: []string{"/v1/"},
		ModelQuery:  true,
	},
	Dialect: engine.DialectOpenAI,
	OOM:     []string{"failed to allocate", "out of memory"},
}
