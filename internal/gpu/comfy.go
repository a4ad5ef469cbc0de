package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
)

// Comfy is the ImageEngine of a ComfyUI server.
type Comfy struct {
	name string
	c    *comfy.Client
	ComfyOptions
}

// ComfyOptions are the intervals a Comfy engine polls and reconnects at.
type ComfyOptions struct {
	HistoryPoll                time.Duration // a job's history, while the websocket is down
	FreePoll                   time.Duration // /system_stats, while a free is confirmed
	BackoffInitial, BackoffMax time.Duration // reconnecting the websocket
}

// NewComfy adapts c, the engine named name.
func NewComfy(name string, c *comfy.Client, o ComfyOptions) *Comfy {
	return &Comfy{name: name, c: c, ComfyOptions: o}
}

func (e *Comfy) Kind() string { return "comfyui" }
func (e *Comfy) Name() string { return e.name }
func (e *Comfy) URL() string  { return e.c.URL() }

// Synchronous implements ImageEngine: a prompt is queued, and its
// prompt_id followed to the job's end.
func (e *Comfy) Synchronous() bool { return false }

// Watch implements ImageEngine with ComfyUI's /ws.
func (e *Comfy) Watch(clientID string, report func(bool, error)) Watch {
	return e.c.NewWatcher(clientID, e.BackoffInitial, e.BackoffMax, report)
}

// watcher is w as the client's, or nil.
func watcher(w Watch) *comfy.Watcher {
	cw, _ := w.(*comfy.Watcher)
	return cw
}

// Queue implements ImageEngine.
func (e *Comfy) Queue(ctx context.Context) (running, pending int, err error) {
	r, p, err := e.c.Queue(ctx)
	return len(r), len(p), err
}

// WaitJob implements ImageEngine.
func (e *Comfy) WaitJob(ctx context.Context, id string, w Watch) (string, error) {
	outcome, err := e.c.WaitJob(ctx, id, watcher(w), e.HistoryPoll)
	return string(outcome), err
}

// WaitIdle implements ImageEngine.
func (e *Comfy) WaitIdle(ctx context.Context, w Watch) error {
	return e.c.WaitIdle(ctx, watcher(w), e.HistoryPoll)
}

// Interrupt implements ImageEngine.
func (e *Comfy) Interrupt(ctx context.Context, id string) error { return e.c.Interrupt(ctx, id) }

// Free implements ImageEngine: POST /free, confirmed by PyTorch's reserved
// memory falling in /system_stats.
func (e *Comfy) Free(ctx context.Context) (bool, error) {
	freed, err := e.c.FreeAndConfirm(ctx, e.FreePoll)
	if errors.Is(err, comfy.ErrNoGPUReading) {
		return false, mark(err, ErrNoGPUReading)
	}
	return freed != comfy.FreedUnverified, err
}

// ComfyProbe reads the card's free memory from ComfyUI's /system_stats:
// what CUDA reports for the whole card, so Ollama's memory shows in it
// too, less what PyTorch keeps reserved inside ComfyUI.
type ComfyProbe struct {
	Engine string // the engine's name in the turnstile
	Client *comfy.Client
	Index  int // the CUDA index of the GPU (gpu_index)
}

func (p ComfyProbe) String() string { return p.Engine }

// FreeVRAM implements VRAMProbe.
func (p ComfyProbe) FreeVRAM(ctx context.Context) (int64, error) {
	devs, err := p.Client.SystemStats(ctx)
	if err != nil {
		return 0, err
	}
	gpu := false
	for _, d := range devs {
		if !d.GPU() {
			continue
		}
		gpu = true
		if d.Index != nil && *d.Index == p.Index {
			return d.CardFree(), nil
		}
	}
	if !gpu {
		return 0, mark(comfy.ErrNoGPUReading, ErrNoGPUReading)
	}
	return 0, fmt.Errorf("comfyui reports no GPU with index %d", p.Index)
}

var _ ImageEngine = (*Comfy)(nil)
