package vllm

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm"
)

// Kind describes vLLM to the turnstile.
var Kind = &engine.Kind{
	Name: "vllm", Title: "vLLM", Class: engine.ClassLLM,
	New: func(name, url string, o engine.Options) (engine.Engine, error) {
		c, err := vllm.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		c.SetHeader(o.Header)
		return New(name, c, o.UnloadPoll), nil
	},
	Sleeps:  true,
	Routes:  engine.Routes{LLMPrefixes: []string{"/v1/"}},
	Dialect: engine.DialectOpenAI,
	OOM:     []string{"out of memory"}, // "CUDA out of memory"
}
