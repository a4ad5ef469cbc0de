package gpu

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// VRAMProbe reads how much memory the card has free, across processes.
// String names it in messages; a probe through an engine names the engine
// (its name in the turnstile), so that a probe error wrapping
// ErrNoGPUReading shows on that engine.
type VRAMProbe interface {
	FreeVRAM(ctx context.Context) (int64, error)
	String() string
}

// SMIProbe runs nvidia-smi; the process is killed at the context's end, so
// a hung driver cannot block longer than the probe's deadline.
type SMIProbe struct {
	Path  string // nvidia-smi's path
	Index int    // the GPU's index (gpu_index)
}

func (p SMIProbe) String() string { return "nvidia-smi" }

// FreeVRAM implements VRAMProbe.
func (p SMIProbe) FreeVRAM(ctx context.Context) (int64, error) {
	out, err := exec.CommandContext(ctx, p.Path, "--query-gpu=memory.free", "--format=csv,noheader,nounits",
		"-i", strconv.Itoa(p.Index)).Output()
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
func (g *GPU) waitVRAM(c *Config, limit time.Duration, before string) error {
	if c.MinFreeVRAM == 0 || c.Probe == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(g.ctx, limit)
	defer cancel()
	start := time.Now()
	pace := poll.New(c.UnloadPoll)
	var free int64 // the last reading
	var read bool
	var probeErr error
	for {
		pctx, pcancel := context.WithTimeout(ctx, c.ProbeTimeout)
		f, err := c.Probe.FreeVRAM(pctx)
		pcancel()
		switch {
		case errors.Is(err, ErrNoGPUReading):
			g.reportNoGPUReading(c.Probe.String(), err)
			return nil // no reading will come: waiting out the limit would only fail the job
		case err == nil && f >= c.MinFreeVRAM:
			if took := time.Since(start); took > 10*time.Millisecond {
				g.log().Info("video memory free", zap.String("before", before), zap.Int64("free_mib", f>>20), zap.Duration("waited", took))
			}
			return nil
		case err == nil:
			free, read = f, true
		case ctx.Err() == nil:
			probeErr = err // a deadline passing mid-probe is not the probe's fault
		}
		if pace.Wait(ctx) != nil {
			g.metrics.UpstreamError("vram", "", "probe")
			if read {
				return fmt.Errorf("%w before %s: %d MiB free after %v, min_free_vram is %d MiB", errVRAMShort, before, free>>20, limit, c.MinFreeVRAM>>20)
			}
			return fmt.Errorf("%w before %s: min_free_vram unverified, the %v probe gave no reading within %v: %v", errVRAMShort, before, c.Probe, limit, probeErr)
		}
	}
}
