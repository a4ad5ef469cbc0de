package turnstile

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/poll"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/comfy"
)

// vramProbe reads how much memory the card has free, across processes.
type vramProbe interface {
	freeVRAM(ctx context.Context) (int64, error)
	String() string
}

// comfyProbe reads the card's free memory from ComfyUI's /system_stats:
// what CUDA reports for the whole card, so Ollama's memory shows in it
// too, less what PyTorch keeps reserved inside ComfyUI.
type comfyProbe struct {
	c     *comfy.Client
	index int
}

func (p comfyProbe) String() string { return "comfyui /system_stats" }

func (p comfyProbe) freeVRAM(ctx context.Context) (int64, error) {
	devs, err := p.c.SystemStats(ctx)
	if err != nil {
		return 0, err
	}
	gpu := false
	for _, d := range devs {
		if !d.GPU() {
			continue
		}
		gpu = true
		if d.Index != nil && *d.Index == p.index {
			return d.CardFree(), nil
		}
	}
	if !gpu {
		return 0, comfy.ErrNoGPUReading
	}
	return 0, fmt.Errorf("comfyui reports no GPU with index %d", p.index)
}

// smiProbe runs nvidia-smi; the process is killed at the context's end, so
// a hung driver cannot block longer than the probe's deadline.
type smiProbe struct {
	path  string
	index int
}

func (p smiProbe) String() string { return "nvidia-smi" }

func (p smiProbe) freeVRAM(ctx context.Context) (int64, error) {
	out, err := exec.CommandContext(ctx, p.path, "--query-gpu=memory.free", "--format=csv,noheader,nounits",
		"-i", strconv.Itoa(p.index)).Output()
	if err != nil {
		return 0, fmt.Errorf("nvidia-smi: %w", err)
	}
	mib, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("nvidia-smi: unexpected output %q", out)
	}
	return mib << 20, nil
}

var errVRAMShort = errors.New("not enough free video memory")

// waitVRAM waits, up to limit, until the card has min_free_vram free. Each
// probe is bounded by probe_timeout. Without min_free_vram it returns at
// once.
func (ts *turnstile) waitVRAM(c *config, limit time.Duration, before string) error {
	if c.MinFreeVRAM == 0 || c.probe == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ts.ctx, limit)
	defer cancel()
	start := time.Now()
	pace := poll.New(c.unloadPoll)
	var free int64 // the last reading
	var read bool
	var probeErr error
	for {
		pctx, pcancel := context.WithTimeout(ctx, c.probeTimeout)
		f, err := c.probe.freeVRAM(pctx)
		pcancel()
		switch {
		case errors.Is(err, comfy.ErrNoGPUReading):
			ts.reportNoGPUReading(err)
			return nil // no reading will come: waiting out the limit would only fail the job
		case err == nil && f >= c.MinFreeVRAM:
			if took := time.Since(start); took > 10*time.Millisecond {
				ts.log().Info("video memory free", zap.String("before", before), zap.Int64("free_mib", f>>20), zap.Duration("waited", took))
			}
			return nil
		case err == nil:
			free, read = f, true
		case ctx.Err() == nil:
			probeErr = err // a deadline passing mid-probe is not the probe's fault
		}
		if pace.Wait(ctx) != nil {
			ts.metrics.upstreamErrors.WithLabelValues(ts.name, "vram", "probe").Inc()
			if read {
				return fmt.Errorf("%w before %s: %d MiB free after %v, min_free_vram is %d MiB", errVRAMShort, before, free>>20, limit, c.MinFreeVRAM>>20)
			}
			return fmt.Errorf("%w before %s: min_free_vram unverified, the %v probe gave no reading within %v: %v", errVRAMShort, before, c.probe, limit, probeErr)
		}
	}
}
