package llamaswap

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap"
)

// Kind describes llama-swap to the turnstile.
var Kind = &engine.Kind{
	Name: "llamaswap", Title: "llama-swap", Class: engine.ClassLLM,
	New: func(name, url string, o engine.Options) (engine.Engine, error) {
		c, err := llamaswap.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		c.SetHeader(o.Header)
		return New(name, c), nil
	},
	Routes: engine.Routes{
		LLM: []string{"/audioapi/v1/tasks/run"},
		// /v/ is its versionless form of the /v1/ routes.
		LLMPrefixes: []string{"/v1/", "/v/"},
		// /upstream/MODEL/... loads MODEL whatever the method.
		AnyMethod: []string{"/upstream"},
		// Through stable-diffusion.cpp.
		ServesJobsOf: "a1111",
	},
	Dialect: engine.DialectOpenAI,
	Servers: servers,
}
