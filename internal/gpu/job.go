package gpu

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// Job describes the image work holding the GPU.
type Job struct {
	PromptID string    `json:"prompt_id,omitempty"`
	Source   string    `json:"source"` // "proxy", or the image engine's name (queued directly)
	Phase    string    `json:"phase"`  // "unloading", "submitting", "running", "draining queue"
	Started  time.Time `json:"started"`
}

// ImageJob is one image prompt sent through the turnstile, from the moment
// it has the GPU to its end. It owns the GPU until it ends: through End if
// no job was queued, or by itself after Submitted once the job it queued
// has ended. Either way the GPU is given back exactly once.
type ImageJob struct {
	use
	started time.Time
	source  string
}

// BeginImage waits, until ctx ends, for the GPU alone for an image prompt.
func (g *GPU) BeginImage(ctx context.Context) (*ImageJob, error) {
	if err := g.acquireExclusive(ctx, lock.ImageJob); err != nil {
		return nil, err
	}
	j := &ImageJob{use: use{g: g, c: g.cfg()}, started: time.Now(), source: "proxy"}
	g.setJob(&Job{Source: j.source, Phase: "unloading", Started: j.started})
	return j, nil
}

// Prepare empties the LLM engine for the job. If that fails, the job has
// ended ("refused"): the GPU is given back and the error says why.
func (j *ImageJob) Prepare() error {
	if err := j.g.emptyForExclusive(j.c); err != nil {
		j.finish("", "refused")
		j.g.log().Error("image job refused: the GPU could not be emptied", zap.Error(err))
		return err
	}
	j.warmAfter = true
	return nil
}

// Submitting marks the prompt as being forwarded to ComfyUI.
func (j *ImageJob) Submitting() { j.g.setPhase("submitting") }

// End ends a job that queued nothing on the image engine: outcome says
// why ("cancelled", "rejected", "failed").
func (j *ImageJob) End(outcome string) { j.finish("", outcome) }

// Submitted says the image engine queued the job as id: the GPU stays the
// job's until it has ended and the engine's queue is empty, bounded by
// job_timeout.
func (j *ImageJob) Submitted(id string) {
	j.owesFree = true
	j.g.setPromptID(id)
	j.g.log().Info("image job queued; holding the GPU until it ends", zap.String("prompt_id", id))
	j.g.spawn(func() { j.holdForJob(id) })
}

// holdForJob keeps the GPU until the job has ended and ComfyUI's queue is
// empty, bounded by job_timeout (then the job is interrupted), and gives
// it back: to the next image job directly, or through a free to LLM use.
func (j *ImageJob) holdForJob(id string) {
	g, c := j.g, j.c
	ctx, cancel := context.WithTimeout(g.ctx, c.JobTimeout-time.Since(j.started))
	defer cancel()
	w := g.currentWatcher()
	outcome, err := c.Image.WaitJob(ctx, id, w)
	if err == nil && outcome != OutcomeLost {
		g.setPhase("draining queue")
		// Work queued directly on ComfyUI meanwhile would run on a GPU
		// given to Ollama: wait for the whole queue.
		err = c.Image.WaitIdle(ctx, w)
	}
	result := outcome
	switch {
	case err != nil && g.ctx.Err() != nil:
		result = "shutdown"
	case err != nil:
		result = "timeout"
		j.interrupt(id)
	case outcome == OutcomeLost:
		g.log().Warn("image job lost: the image engine no longer knows it (restarted?); releasing the GPU",
			zap.String("prompt_id", id))
	}
	j.finish(id, result)
}

// interrupt stops a job that has outlived job_timeout and waits, up to
// interrupt_grace, until it has really stopped and ComfyUI's queue is
// empty: ComfyUI acts on an interrupt only at the job's next node or
// sampler step, and until then the job computes on the GPU.
func (j *ImageJob) interrupt(id string) {
	g, c := j.g, j.c
	g.setPhase("interrupting")
	g.log().Error("image job exceeded job_timeout; interrupting it, and keeping the GPU for it until it has stopped",
		zap.String("prompt_id", id), zap.Duration("job_timeout", c.JobTimeout), zap.Duration("interrupt_grace", c.InterruptGrace))
	ctx, cancel := context.WithTimeout(g.ctx, c.InterruptGrace)
	defer cancel()
	start := time.Now()
	if err := c.Image.Interrupt(ctx, id); err != nil && !jsonhttp.Refused(err) {
		g.log().Warn("interrupt failed", zap.String("prompt_id", id), zap.Error(err))
	}
	w := g.currentWatcher()
	outcome, err := c.Image.WaitJob(ctx, id, w)
	if err == nil {
		err = c.Image.WaitIdle(ctx, w)
	}
	took := time.Since(start)
	if err != nil {
		if g.ctx.Err() == nil {
			g.log().Error("interrupted image job did not stop within interrupt_grace; releasing the GPU after the engine's free while it may still compute",
				zap.String("prompt_id", id), zap.Duration("interrupt_grace", c.InterruptGrace), zap.Error(err))
		}
		return
	}
	g.history.addEvent("interrupt", took, id)
	g.log().Info("interrupted image job stopped", zap.String("prompt_id", id), zap.String("outcome", outcome), zap.Duration("after", took))
}

// finish records a job's end and gives the GPU back. A job that ran (or
// may have run) counts in the metrics and the history.
func (j *ImageJob) finish(id, outcome string) {
	g := j.g
	took := time.Since(j.started)
	if j.owesFree {
		g.metrics.JobEnded(outcome, took)
		g.history.addJob(JobEntry{PromptID: id, Source: j.source, Started: j.started, Seconds: took.Seconds(), Outcome: outcome})
		g.log().Info("image job ended", zap.String("prompt_id", id), zap.String("outcome", outcome), zap.Duration("duration", took))
	}
	g.setJob(nil)
	j.end()
}
