package comfyui

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// ComfyUI's vram_free counts the memory PyTorch keeps reserved but idle
// inside ComfyUI as free; another process cannot use it.
func TestProbeReadsTheCardAsOthersSeeIt(t *testing.T) {
	t.Parallel()
	srv := comfytest.NewServer(gputest.New(), comfytest.Options{JobDuration: time.Millisecond})
	defer srv.Close()
	c, _ := comfy.NewClient(srv.URL, nil)
	ctx := context.Background()
	id := srv.Submit(time.Millisecond)
	if _, err := c.WaitJob(ctx, id, nil, 5*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	devs, err := c.SystemStats(ctx)
	if err != nil || len(devs) != 1 || devs[0].TorchVRAMFree == 0 {
		t.Fatalf("stats %+v %v: want a device with idle reserved memory", devs, err)
	}
	free, err := Probe{Client: c}.FreeVRAM(ctx)
	if want := devs[0].VRAMTotal - srv.Reserved(); err != nil || free != want {
		t.Fatalf("probe read %d MiB, %v; want %d MiB (vram_free %d MiB counts ComfyUI's idle reserve)",
			free>>20, err, want>>20, devs[0].VRAMFree>>20)
	}

	cpu := comfytest.NewServer(gputest.New(), comfytest.Options{Device: "cpu"})
	defer cpu.Close()
	cc, _ := comfy.NewClient(cpu.URL, nil)
	if _, err := (Probe{Client: cc}).FreeVRAM(ctx); !errors.Is(err, comfy.ErrNoGPUReading) {
		t.Fatalf("cpu device: %v, want ErrNoGPUReading", err)
	}
}
