package comfyui

import (
	"context"
	"fmt"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
)

// Probe reads the card's free memory from ComfyUI's /system_stats:
// what CUDA reports for the whole card, so Ollama's memory shows in it
// too, less what PyTorch keeps reserved inside ComfyUI.
type Probe struct {
	Engine string // the engine's name in the turnstile
	Client *comfy.Client
	Index  int // the CUDA index of the GPU (gpu_index)
}

func (p Probe) String() string { return p.Engine }

// FreeVRAM implements the orchestration's VRAM probe. A device without a
// GPU gives an error wrapping engine.ErrNoGPUReading.
func (p Probe) FreeVRAM(ctx context.Context) (int64, error) {
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
		return 0, engine.Mark(comfy.ErrNoGPUReading, engine.ErrNoGPUReading)
	}
	return 0, fmt.Errorf("comfyui reports no GPU with index %d", p.Index)
}
