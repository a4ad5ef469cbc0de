package comfyui

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/workflow"
)

// Kind describes ComfyUI to the turnstile.
var Kind = &engine.Kind{
	Name: "comfyui", Title: "ComfyUI", Class: engine.ClassImage,
	New: func(name, url string, o engine.Options) (engine.Engine, error) {
		c, err := comfy.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		c.SetHeader(o.Header)
		return New(name, c, Options{HistoryPoll: o.HistoryPoll, FreePoll: o.UnloadPoll,
			BackoffInitial: o.BackoffInitial, BackoffMax: o.BackoffMax}), nil
	},
	Shorthand: "comfy", Label: "comfy",
	Probe: "comfy",
	NewProbe: func(e engine.Engine, index int) engine.VRAMProbe {
		ce := e.(*Engine)
		return Probe{Engine: ce.name, Client: ce.c, Index: index}
	},
	Routes: engine.Routes{Jobs: []string{"/prompt", "/api/prompt"}},
	Guess: engine.Guess{Roots: []string{"prompt", "queue", "history", "ws", "view", "view_metadata",
		"upload", "object_info", "system_stats", "interrupt", "free", "extensions", "settings",
		"userdata", "users", "internal", "embeddings", "experiment", "features", "jobs"}},
	Dialect: engine.DialectComfyUI,
	Watch:   engine.WatchSocket,
	JobID:   comfy.PromptID,
	Signature: func(path string, body []byte) string {
		if path == "/prompt" || path == "/api/prompt" {
			return workflow.NodeGraph(body)
		}
		return ""
	},
}
