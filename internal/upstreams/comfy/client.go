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

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
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

// SetHeader makes the client send h with every request (the engine's
// credentials), before it is first used.
func (c *Client) SetHeader(h http.Header) { c.c = c.c.WithHeader(h) }

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

// Device is one entry of /system_stats' devices.
type Device struct {
	Name           string `json:"name"`
	Type           string `json:"type"`
	Index          *int   `json:"index"` // null on the CPU device
	VRAMTotal      int64  `json:"vram_total"`
	VRAMFree       int64  `json:"vram_free"`
	TorchVRAMTotal int64  `json:"torch_vram_total"`
	TorchVRAMFree  int64  `json:"torch_vram_free"`
}

// GPU reports whether the device's figures are a GPU's memory as PyTorch
// manages it (CUDA, and the XPU, NPU and MLU backends that report the same
// way). On the CPU device they are system RAM, on MPS the unified memory,
// and DirectML reports a fixed 1 GiB: none of them is a reading.
func (d Device) GPU() bool {
	switch d.Type {
	case "cuda", "xpu", "npu", "mlu":
		return true
	}
	return false
}

// CardFree is the whole card's free memory as another process sees it.
// vram_free counts the memory PyTorch has reserved but not used inside
// ComfyUI (torch_vram_free) as free, which Ollama could not use.
func (d Device) CardFree() int64 { return d.VRAMFree - d.TorchVRAMFree }

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

// ErrNoGPUReading says that ComfyUI reports no GPU device whose memory can
// be read: it runs on the CPU, on MPS or on DirectML.
var ErrNoGPUReading = errors.New("comfyui reports no GPU memory (it runs on a CPU, MPS or DirectML device)")

// FreedThreshold is how much memory PyTorch may keep reserved in ComfyUI
// after a free for it to count as done: with its models unloaded and its
// cache emptied, ComfyUI keeps little beyond its CUDA context.
const FreedThreshold = 512 << 20

// Freed says what FreeAndConfirm could establish.
type Freed int

// The results of FreeAndConfirm.
const (
	FreedConfirmed   Freed = iota // the reserved memory fell
	FreedNothingHeld              // little was reserved before the free
	FreedUnverified               // /system_stats is missing or has no GPU reading
)

// FreeAndConfirm asks ComfyUI to unload its models and free its cache
// (POST /free, which only sets flags for ComfyUI's worker) and confirms it
// through /system_stats: the memory PyTorch reserves on the GPU
// (torch_vram_total of GPU devices) falls to FreedThreshold or by half.
// ComfyUI moves every model off the GPU first and gives PyTorch's reserved
// memory back only at the very end of the free, so a reading that has not
// moved yet means nothing: it waits until ctx ends. A server without
// /system_stats, or without a GPU device, cannot confirm it (err is
// ErrNoGPUReading for the latter).
func (c *Client) FreeAndConfirm(ctx context.Context, maxInterval time.Duration) (Freed, error) {
	before, statsErr := c.reserved(ctx)
	if err := c.do(ctx, http.MethodPost, "/free", map[string]bool{"unload_models": true, "free_memory": true}, nil); err != nil {
		return FreedUnverified, err
	}
	switch {
	case errors.Is(statsErr, ErrNoGPUReading):
		return FreedUnverified, statsErr
	case statsErr != nil:
		return FreedUnverified, nil
	case before <= FreedThreshold:
		return FreedNothingHeld, nil
	}
	pace := poll.New(maxInterval)
	for {
		now, err := c.reserved(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			return FreedUnverified, err
		case err == nil && (now <= FreedThreshold || now <= before/2):
			return FreedConfirmed, nil
		}
		if err := pace.Wait(ctx); err != nil {
			return FreedUnverified, fmt.Errorf("comfyui still reserves %d MiB of %d MiB: %w", now>>20, before>>20, err)
		}
	}
}

// reserved sums torch_vram_total, PyTorch's reserved memory, over the GPU
// devices.
func (c *Client) reserved(ctx context.Context) (int64, error) {
	devs, err := c.SystemStats(ctx)
	if err != nil {
		return 0, err
	}
	var sum int64
	gpu := false
	for _, d := range devs {
		if d.GPU() {
			sum += d.TorchVRAMTotal
			gpu = true
		}
	}
	if !gpu {
		return 0, ErrNoGPUReading
	}
	return sum, nil
}

// StatusError is a non-2xx answer from ComfyUI.
type StatusError = jsonhttp.StatusError

// Refused reports whether err means nothing listens at the server's
// address: the process is not running, so it holds no GPU memory.
func Refused(err error) bool { return jsonhttp.Refused(err) }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return c.c.Do(ctx, method, path, in, out, 16<<20)
}
