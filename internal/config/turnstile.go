package config

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/vram"
)

// Turnstile is one turnstile's settings with defaults filled in and
// clients built; one is made per config load (Validate) and swapped in
// when the config starts.
type Turnstile struct {
	Settings
	GPU          gpu.Config // what the orchestration of the GPU uses
	HistoryPoll  time.Duration
	Reject       bool // llm_busy_mode reject
	BusyStatus   int
	RetryAfter   time.Duration
	LLMWait      time.Duration
	WaitNotice   time.Duration // wait_notice's interval; 0: off
	ImageWait    time.Duration
	CaptureLimit int64
	WaitBuffer   int64 // wait_buffer_limit

	Routes *route.Guard // this config's engines, against misrouting

	warnings []string // options accepted with no effect (Warnings)
}

// Validate checks the settings and returns them with defaults filled in
// and the engines built. Errors name the option as it is spelled in the
// Caddyfile; the first invalid option in the order below is reported. An
// error about one engine is an *EngineError.
func Validate(s Settings) (*Turnstile, error) {
	c := &Turnstile{Settings: s}
	c.GPU = gpu.Config{WarmModel: s.WarmModel, EarlyUnload: s.EarlyUnload, MaxImageStreak: s.MaxImageStreak, MinFreeVRAM: s.MinFreeVRAM}
	for _, check := range []func(Settings, *Turnstile) error{
		validateBusy, validateDurations, validateEngines, validateRoutes, validateLimits, validateVRAM, validateMemory, validateWarm, validatePresence, validateNotice,
	} {
		if err := check(s, c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Locate finds what the settings need on this host, when the config
// loads: the nvidia-smi executable for vram_probe nvidia-smi, for
// vram_admission (and the card's total, for vram_reserve) and for
// hold_while gpu_process.
func (c *Turnstile) Locate() error {
	if p, ok := c.GPU.Probe.(gpu.SMIProbe); ok {
		path, err := exec.LookPath("nvidia-smi")
		if err != nil {
			return fmt.Errorf("vram_probe: nvidia-smi not found in PATH: %v", err)
		}
		p.Path = path
		c.GPU.Probe = p
	}
	if err := c.locateMemory(); err != nil {
		return err
	}
	c.locatePresence()
	c.locateCard()
	return nil
}

// locateCard lets the orchestration read the card's compute processes
// where nvidia-smi reads the card (min_free_vram or vram_admission): an
// LLM engine whose processes cannot be seen is confirmed gone by the card.
func (c *Turnstile) locateCard() {
	path, index := "", 0
	if p, ok := c.GPU.Probe.(gpu.SMIProbe); ok {
		path, index = p.Path, p.Index
	} else if m := c.GPU.Memory; m != nil && m.SMIPath != "" {
		path, index = m.SMIPath, m.Index
	}
	if path == "" {
		return
	}
	c.GPU.CardProcesses = func(ctx context.Context) (map[int32]int64, error) {
		return vram.Processes(ctx, path, index)
	}
	c.GPU.CardUsed = func(ctx context.Context) (int64, error) {
		r, err := vram.Read(ctx, path, index)
		return r.Total - r.Free, err
	}
}

// validateRoutes makes the config's guard against misrouting: a
// turnstile's engines, as this config defines them.
func validateRoutes(_ Settings, c *Turnstile) error {
	g, err := route.NewGuard(c.engineURLs())
	c.Routes = g
	return err
}

// engineURLs are the URLs of the engines, LLM engines first.
func (c *Turnstile) engineURLs() []string {
	var urls []string
	for _, e := range c.GPU.LLMs {
		urls = append(urls, e.URL())
	}
	for _, e := range c.GPU.Images {
		urls = append(urls, e.URL())
	}
	return urls
}

// Limits are what a request of c may take from the wait budget, its body
// up to body bytes; log gets the budget's warnings.
func (c *Turnstile) Limits(body int64, log *zap.Logger) admit.Limits {
	return admit.Limits{Buffer: c.WaitBuffer, MaxWaiting: c.MaxWaiting, Body: body, Log: log}
}

// CaptureLimitOf is how much of an image engine's answer to a job is kept
// to read its prompt_id: none for a synchronous engine (synchronous),
// whose status is enough.
func (c *Turnstile) CaptureLimitOf(synchronous bool) int64 {
	if synchronous {
		return 0
	}
	return c.CaptureLimit
}
