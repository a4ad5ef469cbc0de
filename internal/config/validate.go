package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// The defaults, as in the original stand-alone program.
// DefaultBusyRetryAfter is busy_retry_after's default.
const DefaultBusyRetryAfter = 30 * time.Second

const (
	defaultBusyStatus         = 503
	defaultLLMWaitTimeout     = 10 * time.Minute
	defaultImageWaitTimeout   = 30 * time.Minute
	defaultUnloadTimeout      = 60 * time.Second
	defaultJobTimeout         = 15 * time.Minute
	defaultFreeTimeout        = 30 * time.Second
	defaultInterruptGrace     = 60 * time.Second
	defaultWarmTimeout        = 2 * time.Minute
	defaultUnloadPollInterval = 500 * time.Millisecond
	defaultHistoryPoll        = time.Second
	defaultProbeTimeout       = 5 * time.Second
	defaultBackoffInitial     = time.Second
	defaultBackoffMax         = 60 * time.Second
	defaultPromptCaptureLimit = 64 << 10
	defaultWaitBufferLimit    = 256 << 20
)

// The largest values the options take.
const (
	MaxPromptCaptureLimit = 1 << 30 // prompt_capture_limit
	MaxWaitBufferLimit    = 1 << 40 // wait_buffer_limit
)

// validateWarm picks the engine that loads warm_model: the first LLM
// engine that can warm.
func validateWarm(s Settings, c *Turnstile) error {
	if s.WarmModel == "" {
		return nil
	}
	for _, e := range c.GPU.LLMs {
		if k, ok := kinds.Named(e.Kind()); ok && k.Warms {
			c.GPU.WarmEngine = e
			return nil
		}
	}
	return fmt.Errorf("warm_model: %q needs an engine that can load it ahead (%s)", s.WarmModel, kinds.WarmNames())
}

// validateBusy checks what a blocked LLM request is answered.
func validateBusy(s Settings, c *Turnstile) error {
	switch s.LLMBusyMode {
	case "", "wait":
	case "reject":
		c.Reject = true
	default:
		return fmt.Errorf("llm_busy_mode: %q is neither wait nor reject", s.LLMBusyMode)
	}
	c.BusyStatus = s.LLMBusyStatus
	if c.BusyStatus == 0 {
		c.BusyStatus = defaultBusyStatus
	}
	if c.BusyStatus < 400 || c.BusyStatus > 599 {
		return fmt.Errorf("llm_busy_status: %d is outside 400-599", c.BusyStatus)
	}
	return nil
}

// validateDurations fills in every duration, its default if unset.
func validateDurations(s Settings, c *Turnstile) error {
	durations := []struct {
		name string
		val  caddy.Duration
		def  time.Duration
		dst  *time.Duration
	}{
		{"busy_retry_after", s.BusyRetryAfter, defaultRetryAfter(s), &c.RetryAfter},
		{"llm_wait_timeout", s.LLMWaitTimeout, defaultLLMWaitTimeout, &c.LLMWait},
		{"image_wait_timeout", s.ImageWaitTimeout, defaultImageWaitTimeout, &c.ImageWait},
		{"unload_timeout", s.UnloadTimeout, defaultUnloadTimeout, &c.GPU.UnloadTimeout},
		{"job_timeout", s.JobTimeout, defaultJobTimeout, &c.GPU.JobTimeout},
		{"free_timeout", s.FreeTimeout, defaultFreeTimeout, &c.GPU.FreeTimeout},
		{"interrupt_grace", s.InterruptGrace, defaultInterruptGrace, &c.GPU.InterruptGrace},
		{"warm_timeout", s.WarmTimeout, defaultWarmTimeout, &c.GPU.WarmTimeout},
		{"unload_poll_interval", s.UnloadPollInterval, defaultUnloadPollInterval, &c.GPU.UnloadPoll},
		{"history_poll_interval", s.HistoryPollInterval, defaultHistoryPoll, &c.HistoryPoll},
		{"probe_timeout", s.ProbeTimeout, defaultProbeTimeout, &c.GPU.ProbeTimeout},
		{"backoff initial", s.BackoffInitial, defaultBackoffInitial, &c.GPU.BackoffInitial},
		{"backoff max", s.BackoffMax, defaultBackoffMax, &c.GPU.BackoffMax},
	}
	for _, d := range durations {
		switch {
		case d.val < 0:
			return fmt.Errorf("%s: %v is negative", d.name, time.Duration(d.val))
		case d.val == 0:
			*d.dst = d.def
		default:
			*d.dst = time.Duration(d.val)
		}
	}
	if c.GPU.BackoffMax < c.GPU.BackoffInitial {
		return fmt.Errorf("backoff: max %v is less than initial %v", c.GPU.BackoffMax, c.GPU.BackoffInitial)
	}
	return nil
}

// validateLimits checks the sizes and counts.
func validateLimits(s Settings, c *Turnstile) error {
	switch {
	case s.PromptCaptureLimit < 0:
		return fmt.Errorf("prompt_capture_limit: %d is negative", s.PromptCaptureLimit)
	case s.PromptCaptureLimit == 0:
		c.CaptureLimit = defaultPromptCaptureLimit
	case s.PromptCaptureLimit < 64:
		return fmt.Errorf("prompt_capture_limit: %d bytes cannot hold a prompt_id (at least 64)", s.PromptCaptureLimit)
	case s.PromptCaptureLimit > MaxPromptCaptureLimit:
		return fmt.Errorf("prompt_capture_limit: %d is over the 1GiB maximum", s.PromptCaptureLimit)
	default:
		c.CaptureLimit = s.PromptCaptureLimit
	}
	if err := validateBudget(s, c); err != nil {
		return err
	}
	if s.MaxImageStreak < 0 {
		return fmt.Errorf("max_image_streak: %d is negative", s.MaxImageStreak)
	}
	if s.MinFreeVRAM < 0 {
		return fmt.Errorf("min_free_vram: %d is negative", s.MinFreeVRAM)
	}
	if s.GPUIndex < 0 {
		return fmt.Errorf("gpu_index: %d is negative", s.GPUIndex)
	}
	return nil
}

// smiProbe is vram_probe's name for reading the card with nvidia-smi.
const smiProbe = "nvidia-smi"

// validateVRAM picks the probe min_free_vram reads the card with: through
// an engine of a kind that can read it (the first such kind's is the
// default), or nvidia-smi.
func validateVRAM(s Settings, c *Turnstile) error {
	if s.VRAMProbe == smiProbe {
		if s.MinFreeVRAM > 0 {
			// Looked for in PATH when the config loads (locate), never
			// while it is adapted: adapting does not depend on the host.
			c.GPU.Probe = gpu.SMIProbe{Index: s.GPUIndex}
		}
		return nil
	}
	name := s.VRAMProbe
	if probes := kinds.Probes(); name == "" && len(probes) > 0 {
		name = probes[0]
	}
	k, ok := kinds.ByProbe(name)
	if !ok {
		if s.VRAMProbe == "" {
			return nil
		}
		return fmt.Errorf("vram_probe: %q is neither %s nor %s", s.VRAMProbe, strings.Join(kinds.Probes(), " nor "), smiProbe)
	}
	if s.MinFreeVRAM <= 0 {
		return nil
	}
	e := c.firstOfKind(k.Name)
	if e == nil {
		needs := k.Shorthand
		if needs == "" {
			needs = string(k.Class) + " " + k.Name
		}
		return fmt.Errorf("min_free_vram: the %s probe needs %s (a %s engine) or vram_probe %s", k.Probe, needs, k.Name, smiProbe)
	}
	c.GPU.Probe = k.NewProbe(e, s.GPUIndex)
	return nil
}

// firstOfKind is the config's first engine of kind, nil if none.
func (c *Turnstile) firstOfKind(kind string) engine.Engine {
	for _, e := range c.GPU.LLMs {
		if e.Kind() == kind {
			return e
		}
	}
	for _, e := range c.GPU.Images {
		if e.Kind() == kind {
			return e
		}
	}
	return nil
}

// defaultRetryAfter is 30s, or with auto, job_timeout's default (the
// longest the GPU can be held by one job).
func defaultRetryAfter(s Settings) time.Duration {
	if s.BusyRetryAfterAuto {
		return defaultJobTimeout
	}
	return DefaultBusyRetryAfter
}

// validateBudget checks wait_buffer_limit and max_waiting and fills in
// the default.
func validateBudget(s Settings, c *Turnstile) error {
	switch {
	case s.WaitBufferLimit < 0:
		return fmt.Errorf("wait_buffer_limit: %d is negative", s.WaitBufferLimit)
	case s.WaitBufferLimit > MaxWaitBufferLimit:
		return fmt.Errorf("wait_buffer_limit: %d is over 1TiB", s.WaitBufferLimit)
	case s.WaitBufferLimit == 0:
		c.WaitBuffer = defaultWaitBufferLimit
	default:
		c.WaitBuffer = s.WaitBufferLimit
	}
	if s.MaxWaiting < 0 {
		return fmt.Errorf("max_waiting: %d is negative", s.MaxWaiting)
	}
	return nil
}
