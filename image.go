package turnstile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/comfy"
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
	if c.comfy == nil {
		return next.ServeHTTP(w, r) // no ComfyUI consumer: nothing to arbitrate
	}
	ticket, err := ts.admitWait(r, c, imageBodyLimit)
	if err != nil {
		return ts.refuseWait(w, r, c, err, true)
	}
	defer ticket.done()
	start := time.Now()
	err = ts.acquireExclusive(r.Context(), lock.Image)
	ticket.stopWaiting()
	if err != nil {
		return caddyhttp.Error(statusClientClosed, fmt.Errorf("gpu_turnstile: client went away after waiting %v for the GPU", time.Since(start).Round(time.Millisecond)))
	}
	// From here on every path gives the lock back.
	c = ts.cfg()
	job := &jobInfo{Source: "proxy", Phase: "unloading", Started: time.Now()}
	ts.setJob(job)
	if err := ts.unloadOllama(c); err != nil {
		ts.finishJob(job, "", "refused", false)
		ts.log().Error("image job refused: ollama could not be emptied", zap.Error(err))
		return writeComfyError(w, http.StatusServiceUnavailable, "gpu_busy",
			fmt.Sprintf("gpu_turnstile: %v; image job refused so that the GPU is not shared", err))
	}
	if r.Context().Err() != nil {
		ts.finishJob(job, "", "cancelled", false)
		return caddyhttp.Error(statusClientClosed, fmt.Errorf("gpu_turnstile: client went away while Ollama unloaded"))
	}
	ts.setPhase("submitting")

	// Forward detached from the client: if the client goes away once
	// ComfyUI has the prompt, ComfyUI queues the job anyway, and its
	// prompt_id must still be read so the GPU is held for it.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), c.jobTimeout)
	defer cancel()
	cw := newCaptureWriter(w, c.captureLimit)
	err = next.ServeHTTP(cw, r.WithContext(fctx))
	id, found := comfy.PromptID(cw.body)
	if err != nil || !cw.ok() || !found {
		outcome := "rejected"
		if err != nil {
			outcome = "failed"
		}
		ts.finishJob(job, id, outcome, false)
		if log := ts.log(); log.Core().Enabled(zap.DebugLevel) {
			log.Debug("image request ended without a job", zap.Int("status", cw.status), zap.Bool("prompt_id", found), zap.Error(err))
		}
		return err
	}
	ts.setPromptID(id)
	ts.log().Info("image job queued; holding the GPU until it ends", zap.String("prompt_id", id))
	go ts.holdForJob(job, id, c)
	return nil
}

// holdForJob keeps the GPU until the job has ended and ComfyUI's queue is
// empty, bounded by job_timeout (then the job is interrupted), and gives
// it back: to the next image job directly, or through a free to LLM use.
func (ts *turnstile) holdForJob(job *jobInfo, id string, c *config) {
	ctx, cancel := context.WithTimeout(ts.ctx, c.jobTimeout-time.Since(job.Started))
	defer cancel()
	w := ts.currentWatcher()
	outcome, err := c.comfy.WaitJob(ctx, id, w, c.historyPoll)
	if err == nil && outcome != comfy.Lost {
		ts.setPhase("draining queue")
		// Work queued directly on ComfyUI meanwhile would run on a GPU
		// given to Ollama: wait for the whole queue.
		err = c.comfy.WaitIdle(ctx, w, c.historyPoll)
	}
	result := string(outcome)
	switch {
	case err != nil && ts.ctx.Err() != nil:
		result = "shutdown"
	case err != nil:
		result = "timeout"
		ts.interruptJob(id, c)
	case outcome == comfy.Lost:
		ts.log().Warn("image job lost: in neither ComfyUI's queue nor its history (ComfyUI restarted?); releasing the GPU",
			zap.String("prompt_id", id))
	}
	ts.finishJob(job, id, result, true)
}

// interruptJob stops a job that has outlived job_timeout and waits, up to
// interrupt_grace, until it has really stopped and ComfyUI's queue is
// empty: ComfyUI acts on an interrupt only at the job's next node or
// sampler step, and until then the job computes on the GPU.
func (ts *turnstile) interruptJob(id string, c *config) {
	ts.setPhase("interrupting")
	ts.log().Error("image job exceeded job_timeout; interrupting it, and keeping the GPU for it until it has stopped",
		zap.String("prompt_id", id), zap.Duration("job_timeout", c.jobTimeout), zap.Duration("interrupt_grace", c.interruptGrace))
	ctx, cancel := context.WithTimeout(ts.ctx, c.interruptGrace)
	defer cancel()
	start := time.Now()
	if err := c.comfy.Interrupt(ctx, id); err != nil && !comfy.Refused(err) {
		ts.log().Warn("interrupt failed", zap.String("prompt_id", id), zap.Error(err))
	}
	w := ts.currentWatcher()
	outcome, err := c.comfy.WaitJob(ctx, id, w, c.historyPoll)
	if err == nil {
		err = c.comfy.WaitIdle(ctx, w, c.historyPoll)
	}
	took := time.Since(start)
	if err != nil {
		if ts.ctx.Err() == nil {
			ts.log().Error("interrupted image job did not stop within interrupt_grace; releasing the GPU after ComfyUI's free while it may still compute",
				zap.String("prompt_id", id), zap.Duration("interrupt_grace", c.interruptGrace), zap.Error(err))
		}
		return
	}
	ts.history.addEvent("interrupt", took, id)
	ts.log().Info("interrupted image job stopped", zap.String("prompt_id", id), zap.String("outcome", string(outcome)), zap.Duration("after", took))
}

// finishJob records a job's end and gives the lock back. jobRan says
// whether ComfyUI ran (or may have run) a job that left models behind.
func (ts *turnstile) finishJob(job *jobInfo, id, outcome string, jobRan bool) {
	took := time.Since(job.Started)
	if jobRan {
		imageJobs.WithLabelValues(ts.name, outcome).Inc()
		jobSeconds.WithLabelValues(ts.name, outcome).Observe(took.Seconds())
		ts.history.addJob(jobEntry{PromptID: id, Source: job.Source, Started: job.Started, Seconds: took.Seconds(), Outcome: outcome})
		ts.log().Info("image job ended", zap.String("prompt_id", id), zap.String("outcome", outcome), zap.Duration("duration", took))
	}
	ts.setJob(nil)
	// Ollama was emptied for this request (unless that failed): load the
	// warm model again, as after any job.
	ts.releaseExclusive(jobRan, outcome != "refused")
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
