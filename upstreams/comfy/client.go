// Package comfy is the turnstile's client for ComfyUI: it reads a job's
// history and the queue, frees ComfyUI's memory and confirms it, and watches
// the websocket's status broadcasts so the end of a job is seen at once. It
// never proxies user traffic; Caddy's reverse_proxy does.
package comfy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/poll"
)

// Client talks to one ComfyUI server.
type Client struct {
	c  jsonhttp.Client
	hc *http.Client // for the websocket
}

// NewClient returns a client for the ComfyUI server at baseURL
// (e.g. http://127.0.0.1:8189). hc may be nil.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	c, err := jsonhttp.New("comfyui", baseURL, hc)
	if err != nil {
		return nil, err
	}
	return &Client{c: c, hc: hc}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.c.URL() }

// JobStatus is a finished job's status from its history entry.
type JobStatus struct {
	StatusStr string `json:"status_str"` // "success" or "error"
	Completed bool   `json:"completed"`
	// Outcome is the last execution message: "execution_success",
	// "execution_error" or "execution_interrupted".
	Outcome string `json:"-"`
}

// History returns the history entry of a job: found is false while the job
// is pending or running (or unknown to ComfyUI).
func (c *Client) History(ctx context.Context, promptID string) (status JobStatus, found bool, err error) {
	var out map[string]struct {
		Status struct {
			StatusStr string              `json:"status_str"`
			Completed bool                `json:"completed"`
			Messages  [][]json.RawMessage `json:"messages"`
		} `json:"status"`
	}
	if err := c.do(ctx, http.MethodGet, "/history/"+url.PathEscape(promptID), nil, &out); err != nil {
		return JobStatus{}, false, err
	}
	entry, ok := out[promptID]
	if !ok {
		return JobStatus{}, false, nil
	}
	st := JobStatus{StatusStr: entry.Status.StatusStr, Completed: entry.Status.Completed}
	if n := len(entry.Status.Messages); n > 0 && len(entry.Status.Messages[n-1]) > 0 {
		json.Unmarshal(entry.Status.Messages[n-1][0], &st.Outcome)
	}
	if st.Outcome == "" {
		st.Outcome = st.StatusStr
	}
	return st, true, nil
}

// Queue returns the prompt ids running and pending.
func (c *Client) Queue(ctx context.Context) (running, pending []string, err error) {
	var out struct {
		Running [][]json.RawMessage `json:"queue_running"`
		Pending [][]json.RawMessage `json:"queue_pending"`
	}
	if err := c.do(ctx, http.MethodGet, "/queue", nil, &out); err != nil {
		return nil, nil, err
	}
	ids := func(items [][]json.RawMessage) []string {
		var s []string
		for _, it := range items {
			var id string
			if len(it) > 1 && json.Unmarshal(it[1], &id) == nil {
				s = append(s, id)
			}
		}
		return s
	}
	return ids(out.Running), ids(out.Pending), nil
}

// Free asks ComfyUI to unload its models and free its cache. ComfyUI only
// sets flags and answers at once; its worker acts when idle. See
// WaitFreed.
func (c *Client) Free(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/free", map[string]bool{"unload_models": true, "free_memory": true}, nil)
}

// Device is one entry of /system_stats' devices.
type Device struct {
	Name           string `json:"name"`
	Type           string `json:"type"`
	Index          int    `json:"index"`
	VRAMTotal      int64  `json:"vram_total"`
	VRAMFree       int64  `json:"vram_free"`
	TorchVRAMTotal int64  `json:"torch_vram_total"`
	TorchVRAMFree  int64  `json:"torch_vram_free"`
}

// SystemStats returns ComfyUI's devices.
func (c *Client) SystemStats(ctx context.Context) ([]Device, error) {
	var out struct {
		Devices []Device `json:"devices"`
	}
	if err := c.do(ctx, http.MethodGet, "/system_stats", nil, &out); err != nil {
		return nil, err
	}
	return out.Devices, nil
}

// FreedThreshold is how much memory PyTorch may keep reserved in ComfyUI
// after a free for it to count as done: with its models unloaded and its
// cache emptied, ComfyUI keeps little beyond its CUDA context.
const FreedThreshold = 512 << 20

// WaitFreed polls /system_stats until ComfyUI's reserved memory
// (torch_vram_total, summed over devices) is at most FreedThreshold, so
// the GPU goes to Ollama only once the free has taken effect. A server
// without /system_stats, or without CUDA devices, counts as freed.
func (c *Client) WaitFreed(ctx context.Context, maxInterval time.Duration) error {
	pace := poll.New(maxInterval)
	for {
		devs, err := c.SystemStats(ctx)
		var se *StatusError
		if errors.As(err, &se) && se.Status == http.StatusNotFound {
			return nil
		}
		if err != nil {
			return err
		}
		var reserved int64
		for _, d := range devs {
			reserved += d.TorchVRAMTotal
		}
		if reserved <= FreedThreshold {
			return nil
		}
		if err := pace.Wait(ctx); err != nil {
			return fmt.Errorf("comfyui still reserves %d MiB: %w", reserved>>20, err)
		}
	}
}

// StatusError is a non-2xx answer from ComfyUI.
type StatusError = jsonhttp.StatusError

// Refused reports whether err means nothing listens at the server's
// address: the process is not running, so it holds no GPU memory.
func Refused(err error) bool { return jsonhttp.Refused(err) }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return c.c.Do(ctx, method, path, in, out, 16<<20)
}
