package turnstile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
)

// imageBodyLimit bounds how much of a /prompt body is read into memory
// before it waits (workflows are JSON graphs, rarely over a few MiB);
// within wait_buffer_limit, like LLM bodies (budget.go).
const imageBodyLimit = 32 << 20

// serveImage serves a ComfyUI prompt: it takes the GPU alone, empties
// Ollama, forwards the prompt, and keeps the GPU after the response until
// the job it queued has ended.
func (h *Handler) serveImage(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	ts := h.ts
	c := ts.cfg()
	if c.gpu.Image == nil {
		return next.ServeHTTP(w, r) // no ComfyUI consumer: nothing to arbitrate
	}
	ticket, err := ts.admitWait(r, c, imageBodyLimit)
	if err != nil {
		return ts.refuseWait(w, r, c, err, true)
	}
	defer ticket.done()
	start := time.Now()
	job, err := ts.BeginImage(r.Context())
	ticket.stopWaiting()
	if err != nil {
		return clientGone("after waiting %v for the GPU", time.Since(start).Round(time.Millisecond))
	}
	// From here on every path ends the job, which gives the lock back.
	c = ts.cfg()
	if err := job.Prepare(); err != nil {
		return writeComfyError(w, http.StatusServiceUnavailable, "gpu_busy",
			fmt.Sprintf("gpu_turnstile: %v; image job refused so that the GPU is not shared", err))
	}
	if r.Context().Err() != nil {
		job.End("cancelled")
		return clientGone("while Ollama unloaded")
	}
	job.Submitting()

	// Forward detached from the client: if the client goes away once
	// ComfyUI has the prompt, ComfyUI queues the job anyway, and its
	// prompt_id must still be read so the GPU is held for it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), c.gpu.JobTimeout)
	defer cancel()
	cw := newCaptureWriter(w, c.captureLimit)
	err = next.ServeHTTP(cw, r.WithContext(fctx))
	id, found := comfy.PromptID(cw.body)
	if err != nil || !cw.ok() || !found {
		outcome := "rejected"
		if err != nil {
			outcome = "failed"
		}
		job.End(outcome)
		if log := ts.log(); log.Core().Enabled(zap.DebugLevel) {
			log.Debug("image request ended without a job", zap.Int("status", cw.status), zap.Bool("prompt_id", found), zap.Error(err))
		}
		return err
	}
	job.Submitted(id)
	return nil
}

// writeComfyError answers in ComfyUI's error shape.
func writeComfyError(w http.ResponseWriter, status int, typ, msg string) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	return json.NewEncoder(w).Encode(map[string]any{
		"error":       map[string]any{"type": typ, "message": msg, "details": "", "extra_info": map[string]any{}},
		"node_errors": map[string]any{},
	})
}
