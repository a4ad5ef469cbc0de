// Package a1111 is the turnstile's client for AUTOMATIC1111's
// stable-diffusion-webui and for Forge, through their /sdapi/v1 API: it
// watches a job through /progress, reads the memory through /memory, takes
// the checkpoint off the GPU and confirms it, puts it back, and interrupts
// a job. It never proxies user traffic; Caddy's reverse_proxy does.
//
// The facts it keeps (engines-api.md §4): a generation is synchronous and
// runs inside one FIFO queue lock that the browser UI shares, so /progress
// is the only view of a running job, and requests waiting for the lock do
// not show there at all. unload-checkpoint and reload-checkpoint are not
// under that lock: sent during a job they act during it, so call them
// only between jobs. A1111 does not bring an unloaded checkpoint back by
// itself (call ReloadCheckpoint before the next image job); Forge does,
// and its reload is a no-op. In /memory, cuda.reserved.current is this
// process's own memory and cuda.system the whole device's.
package a1111

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// Client talks to one A1111 or Forge server.
type Client struct {
	c jsonhttp.Client
}

// NewClient returns a client for the server at baseURL
// (e.g. http://127.0.0.1:7860). hc may be nil.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	c, err := jsonhttp.New("a1111", baseURL, hc)
	if err != nil {
		return nil, err
	}
	return &Client{c: c}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.c.URL() }

// SetHeader makes the client send h with every request (the engine's
// credentials), before it is first used.
func (c *Client) SetHeader(h http.Header) { c.c = c.c.WithHeader(h) }

// Progress is what /sdapi/v1/progress says of the running job.
type Progress struct {
	Progress float64 // 0..1; 0 when idle
	// JobCount is 0 when no job runs, -1 from a job's start until it
	// knows how many images it makes (while it loads its model, and
	// throughout a CLIP interrogation), and then that number.
	JobCount      int
	Job           string // "scripts_txt2img", "extras", "task(…)" for a UI job; "" when idle
	Interrupted   bool   // set by an interrupt; stays set after an API job until the next begins
	SamplingStep  int
	SamplingSteps int
}

// Progress reads /progress, without the preview image.
func (c *Client) Progress(ctx context.Context) (Progress, error) {
	var out struct {
		Progress float64 `json:"progress"`
		State    struct {
			Interrupted   bool   `json:"interrupted"`
			Job           string `json:"job"`
			JobCount      int    `json:"job_count"`
			SamplingStep  int    `json:"sampling_step"`
			SamplingSteps int    `json:"sampling_steps"`
		} `json:"state"`
	}
	if err := c.do(ctx, http.MethodGet, "/sdapi/v1/progress?skip_current_image=true", &out); err != nil {
		return Progress{}, err
	}
	st := out.State
	return Progress{Progress: out.Progress, JobCount: st.JobCount, Job: st.Job, Interrupted: st.Interrupted,
		SamplingStep: st.SamplingStep, SamplingSteps: st.SamplingSteps}, nil
}

// UnloadCheckpoint takes the checkpoint off the GPU and returns once that
// is done: A1111 moves it to the CPU and empties PyTorch's cache, Forge
// frees every model. Not under the queue lock: never call it during a job.
func (c *Client) UnloadCheckpoint(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/sdapi/v1/unload-checkpoint", nil)
}

// ReloadCheckpoint puts A1111's checkpoint back on the GPU and returns
// once it is there; A1111 needs it after UnloadCheckpoint, before any
// generation. On Forge it does nothing (Forge reloads by itself). Not
// under the queue lock: never call it during a job.
func (c *Client) ReloadCheckpoint(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/sdapi/v1/reload-checkpoint", nil)
}

// Interrupt asks the running job to stop. The server answers at once; the
// job stops at its next sampling step and its request then answers with
// what it has made. A job still waiting for the queue lock is not
// affected.
func (c *Client) Interrupt(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/sdapi/v1/interrupt", nil)
}

// WaitIdle polls /progress until no job runs (job_count 0), pacing the
// polls with poll.New(pollMax). Idle means nothing runs now: a request
// waiting for the queue lock starts the moment the last job ends, and
// /progress never shows it, so only a caller that gates every route
// (API and UI) can trust it for longer than an instant.
func (c *Client) WaitIdle(ctx context.Context, pollMax time.Duration) error {
	pace := poll.New(pollMax)
	var last Progress
	for {
		p, err := c.Progress(ctx)
		switch {
		case err != nil && ctx.Err() != nil && last.JobCount != 0:
			return busy(last, ctx.Err())
		case err != nil:
			return fmt.Errorf("read a1111 progress: %w", err)
		case p.JobCount == 0:
			return nil
		}
		last = p
		if err := pace.Wait(ctx); err != nil {
			return busy(last, err)
		}
	}
}

func busy(p Progress, err error) error {
	return fmt.Errorf("a1111 still runs job %q (step %d of %d): %w", p.Job, p.SamplingStep, p.SamplingSteps, err)
}

// StatusError is a non-2xx answer. A1111's error body is
// {"error":type,"detail":S,"body":S,"errors":str(e)}; Message holds its
// "error", the exception's type name (e.g. "RuntimeError").
type StatusError = jsonhttp.StatusError

// Refused reports whether err means nothing listens at the server's
// address: the process is not running, so it holds no GPU memory.
func Refused(err error) bool { return jsonhttp.Refused(err) }

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	return c.c.Do(ctx, method, path, nil, out, 1<<20)
}
