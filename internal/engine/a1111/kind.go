package a1111

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/workflow"
)

// Kind describes AUTOMATIC1111's web UI (and Forge) to the turnstile.
var Kind = &engine.Kind{
	Name: "a1111", Title: "A1111", Class: engine.ClassImage,
	New: func(name, url string, o engine.Options) (engine.Engine, error) {
		c, err := a1111.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		c.SetHeader(o.Header)
		return New(name, c, o.HistoryPoll, o.UnloadPoll), nil
	},
	Routes: engine.Routes{
		// Its answer comes at the job's end; setting a checkpoint
		// through /options loads it on the GPU too.
		Jobs: []string{"/sdapi/v1/txt2img", "/sdapi/v1/img2img", "/sdapi/v1/extra-single-image",
			"/sdapi/v1/extra-batch-images", "/sdapi/v1/interrogate", "/sdapi/v1/options",
			"/sdapi/v1/reload-checkpoint", "/sdapi/v1/create/embedding", "/sdapi/v1/create/hypernetwork",
			"/sdapi/v1/train/embedding", "/sdapi/v1/train/hypernetwork"},
	},
	Guess:   engine.Guess{Prefixes: []string{"/sdapi/"}},
	Dialect: engine.DialectA1111,
	Watch:   engine.WatchPolling,
	Signature: func(path string, body []byte) string {
		switch path {
		case "/sdapi/v1/txt2img", "/sdapi/v1/img2img":
			return workflow.Generation(body)
		case "/sdapi/v1/extra-single-image", "/sdapi/v1/extra-batch-images":
			return workflow.Upscale(body)
		}
		return ""
	},
}
