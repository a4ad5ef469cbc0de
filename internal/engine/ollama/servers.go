package ollama

import (
	"context"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
)

// servers finds an Ollama's runners by their command line and the port
// their environment names: they outlive an `ollama serve` killed with
// SIGKILL, and are found whether or not the server's own process can be
// seen. The models, if wanted, are those /api/ps lists, if it answers.
func servers(ctx context.Context, e engine.LLM, models bool) (engine.ModelServers, error) {
	o := e.(*Engine)
	runners, visible, err := o.c.LocalRunners(ctx)
	out := engine.ModelServers{Complete: visible && err == nil}
	for _, r := range runners {
		out.PIDs = append(out.PIDs, r.PID)
	}
	if !models {
		return out, err
	}
	if listed, lerr := o.Loaded(ctx); lerr == nil {
		out.Models, out.Listed = listed, true
	}
	return out, err
}
