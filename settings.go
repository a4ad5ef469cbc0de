package turnstile

import (
	"fmt"
	"math"
	"os/exec"
	"time"

	"github.com/caddyserver/caddy/v2"

	configjson "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
)

// Settings configure one turnstile: the GPU it guards and the engines that
// share it. Every duration accepts Caddy's duration syntax; a zero or
// absent value means the default.
type Settings struct {
	// Ollama's URL (e.g. http://127.0.0.1:11435). Empty disables the
	// Ollama consumer: no unload or warm-up before and after image jobs.
	Ollama string `json:"ollama,omitempty"`

	// ComfyUI's URL (e.g. http://127.0.0.1:8189). Empty disables the
	// ComfyUI consumer: image requests pass through untouched. At least one
	// engine (ollama, comfy, llm or image) is required.
	Comfy string `json:"comfy,omitempty"`

	// More LLM engines, after ollama: Caddyfile `llm KIND URL [{ name
	// NAME }]`, repeatable. Every one is emptied, and the emptying
	// confirmed, before exclusive use.
	LLM []EngineSettings `json:"llm,omitempty"`

	// More image engines, after comfy: Caddyfile `image KIND URL [{ name
	// NAME }]`, repeatable.
	Image []EngineSettings `json:"image,omitempty"`

	// What a blocked LLM request does: "wait" (default) holds it until the
	// GPU is free, up to llm_wait_timeout; "reject" answers at once with
	// llm_busy_status and Retry-After.
	LLMBusyMode string `json:"llm_busy_mode,omitempty"`

	// The status of busy answers, 400-599. Default 503; 429 suits clients
	// that back off on rate limits.
	LLMBusyStatus int `json:"llm_busy_status,omitempty"`

	// The Retry-After of busy answers, rounded up to whole seconds.
	// Default 30s. With busy_retry_after_auto it is the upper bound of
	// the estimate instead.
	BusyRetryAfter caddy.Duration `json:"busy_retry_after,omitempty"`

	// BusyRetryAfterAuto estimates Retry-After from the work ahead: the
	// running job's expected rest (from recent job durations), the image
	// jobs queued behind it, a hold's remaining lease. Caddyfile:
	// `busy_retry_after auto [MAX]`. Off by default.
	BusyRetryAfterAuto bool `json:"busy_retry_after_auto,omitempty"`

	// The longest an LLM request waits for the GPU in wait mode before a
	// busy answer, counted from its arrival: the reading of its body is
	// part of the wait. Default 10m.
	LLMWaitTimeout caddy.Duration `json:"llm_wait_timeout,omitempty"`

	// The longest an image job (a ComfyUI prompt, an A1111 request)
	// waits for the GPU, counted from its arrival with its body's; past
	// it the job is answered 503 in the engine's error shape, with
	// Retry-After, and nothing reaches the engine. It is also the default
	// "wait_timeout" of a hold request. Default 30m.
	ImageWaitTimeout caddy.Duration `json:"image_wait_timeout,omitempty"`

	// How long the LLM engines may take to empty (all at once) before an
	// image job or a hold; past it the job is refused with 503. It bounds
	// a wake (vLLM) too. Default 60s.
	UnloadTimeout caddy.Duration `json:"unload_timeout,omitempty"`

	// The longest an image job may hold the GPU; past it the job is
	// interrupted, and the GPU released once it has stopped. Default 15m.
	JobTimeout caddy.Duration `json:"job_timeout,omitempty"`

	// How long an interrupted job may take to stop. ComfyUI stops a job
	// only at its next node or sampler step, seconds later; until then
	// the GPU stays ComfyUI's. Past the grace the failure is logged and
	// the GPU goes on (after ComfyUI's free). Default 60s.
	InterruptGrace caddy.Duration `json:"interrupt_grace,omitempty"`

	// How long an image engine may take to free its memory after its
	// work. Default 30s.
	FreeTimeout caddy.Duration `json:"free_timeout,omitempty"`

	// A model to load again after an image job or a hold ends, so the next
	// chat starts warm. Off by default.
	WarmModel string `json:"warm_model,omitempty"`

	// How long the warm-up may take. Default 2m.
	WarmTimeout caddy.Duration `json:"warm_timeout,omitempty"`

	// The longest interval between /api/ps polls while Ollama unloads;
	// polling starts fast and backs off to it. Default 500ms.
	UnloadPollInterval caddy.Duration `json:"unload_poll_interval,omitempty"`

	// How often a job's history is polled while ComfyUI's websocket is
	// down (while it is up, its broadcasts end the wait at once).
	// Default 1s.
	HistoryPollInterval caddy.Duration `json:"history_poll_interval,omitempty"`

	// How long the start-up probe of ComfyUI's queue may take. Default 5s.
	ProbeTimeout caddy.Duration `json:"probe_timeout,omitempty"`

	// The first retry delay when an upstream refuses connections (the
	// websocket watch, the start-up probe). Default 1s.
	BackoffInitial caddy.Duration `json:"backoff_initial,omitempty"`

	// The cap of the exponential retry delay. Default 60s.
	BackoffMax caddy.Duration `json:"backoff_max,omitempty"`

	// How many bytes of a /prompt response are read to find its prompt_id.
	// The client always gets the whole response, unbuffered. Default 65536.
	PromptCaptureLimit int64 `json:"prompt_capture_limit,omitempty"`

	// MinFreeVRAM, if set, is how many bytes of video memory must be free
	// before the GPU changes hands: after Ollama's unload (before the
	// prompt goes to ComfyUI; not reached within unload_timeout, the job
	// is refused) and after ComfyUI's free (before LLM requests go; not
	// reached within free_timeout, it is reported and they go anyway).
	// Drivers free memory some seconds after a process lets go of it.
	MinFreeVRAM int64 `json:"min_free_vram,omitempty"`

	// VRAMProbe reads the card's free memory for min_free_vram: "comfy"
	// (ComfyUI's /system_stats, the default when comfy is set) or
	// "nvidia-smi". Each reading is bounded by probe_timeout.
	VRAMProbe string `json:"vram_probe,omitempty"`

	// GPUIndex is the device index the probe reads. Default 0.
	GPUIndex int `json:"gpu_index,omitempty"`

	// EarlyUnload asks Ollama to unload its models as soon as an image job
	// or hold is waiting, instead of once the LLM requests have drained.
	// Ollama unloads a model only after its running requests end, so they
	// finish normally, and the unload is done by the time they are. Off
	// by default.
	EarlyUnload bool `json:"early_unload,omitempty"`

	// MaxImageStreak bounds how many image jobs (or holds) in a row may
	// take the GPU while LLM requests wait; then the waiting LLM requests
	// get a turn. Zero (default) keeps strict image priority.
	MaxImageStreak int `json:"max_image_streak,omitempty"`

	// WaitBufferLimit bounds, in bytes, the request bodies that requests
	// waiting for this GPU hold in memory together (each buffers up to
	// 8 MiB, an image prompt 32 MiB, so that a client that leaves is
	// noticed). They are counted from before they are read until the
	// upstream has read them. A request that would go past it gets the
	// busy answer at once; requests already waiting keep their place.
	// Default 256 MiB.
	WaitBufferLimit int64 `json:"wait_buffer_limit,omitempty"`

	// MaxWaiting caps how many requests (LLM and image) may wait for this
	// GPU at once; more get the busy answer at once. Zero (default): no
	// cap.
	MaxWaiting int `json:"max_waiting,omitempty"`

	PresenceSettings
}

// UnmarshalJSON decodes the settings strictly (unknown fields are
// refused, as Caddy refuses them elsewhere), naming the field of any value
// it refuses: encoding/json names none for a duration that does not parse.
func (s *Settings) UnmarshalJSON(b []byte) error {
	type plain Settings // the fields, without this method
	return configjson.DecodeFields(b, (*plain)(s))
}

// The defaults, as in the original stand-alone program.
const (
	defaultBusyStatus         = 503
	defaultBusyRetryAfter     = 30 * time.Second
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
	maxPromptCaptureLimit     = 1 << 30
)

// config is a turnstile's settings with defaults filled in and clients
// built; one is made per config load and swapped in when the config starts.
type config struct {
	Settings
	gpu          gpu.Config    // what the orchestration of the GPU uses
	comfy        *comfy.Client // the first ComfyUI engine's, for the comfy VRAM probe; nil if none
	comfyName    string        // that engine's name
	historyPoll  time.Duration
	reject       bool
	busyStatus   int
	retryAfter   time.Duration
	llmWait      time.Duration
	imageWait    time.Duration
	captureLimit int64

	waitBufferLimit int64

	routes *route.Guard // this config's engines, against misrouting (misroute.go)
}

// validate checks the settings and returns them with defaults filled in.
// Errors name the option as it is spelled in the Caddyfile; the first
// invalid option in the order below is reported.
func (s Settings) validate() (*config, error) {
	c := &config{Settings: s}
	c.gpu = gpu.Config{WarmModel: s.WarmModel, EarlyUnload: s.EarlyUnload, MaxImageStreak: s.MaxImageStreak, MinFreeVRAM: s.MinFreeVRAM}
	for _, check := range []func(Settings, *config) error{
		validateBusy, validateDurations, validateEngines, validateRoutes, validateLimits, validateVRAM, validateWarm, validatePresence,
	} {
		if err := check(s, c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// validateWarm picks the engine that loads warm_model: the first LLM
// engine that can warm.
func validateWarm(s Settings, c *config) error {
	if s.WarmModel == "" {
		return nil
	}
	for _, e := range c.gpu.LLMs {
		if warms[e.Kind()] {
			c.gpu.WarmEngine = e
			return nil
		}
	}
	return fmt.Errorf("warm_model: %q needs an engine that can load it ahead (ollama or llamacpp)", s.WarmModel)
}

// warms are the LLM engine kinds that can load a model ahead of a request.
var warms = map[string]bool{"ollama": true, "llamacpp": true}

// validateBusy checks what a blocked LLM request is answered.
func validateBusy(s Settings, c *config) error {
	switch s.LLMBusyMode {
	case "", "wait":
	case "reject":
		c.reject = true
	default:
		return fmt.Errorf("llm_busy_mode: %q is neither wait nor reject", s.LLMBusyMode)
	}
	c.busyStatus = s.LLMBusyStatus
	if c.busyStatus == 0 {
		c.busyStatus = defaultBusyStatus
	}
	if c.busyStatus < 400 || c.busyStatus > 599 {
		return fmt.Errorf("llm_busy_status: %d is outside 400-599", c.busyStatus)
	}
	return nil
}

// validateDurations fills in every duration, its default if unset.
func validateDurations(s Settings, c *config) error {
	durations := []struct {
		name string
		val  caddy.Duration
		def  time.Duration
		dst  *time.Duration
	}{
		{"busy_retry_after", s.BusyRetryAfter, defaultRetryAfter(s), &c.retryAfter},
		{"llm_wait_timeout", s.LLMWaitTimeout, defaultLLMWaitTimeout, &c.llmWait},
		{"image_wait_timeout", s.ImageWaitTimeout, defaultImageWaitTimeout, &c.imageWait},
		{"unload_timeout", s.UnloadTimeout, defaultUnloadTimeout, &c.gpu.UnloadTimeout},
		{"job_timeout", s.JobTimeout, defaultJobTimeout, &c.gpu.JobTimeout},
		{"free_timeout", s.FreeTimeout, defaultFreeTimeout, &c.gpu.FreeTimeout},
		{"interrupt_grace", s.InterruptGrace, defaultInterruptGrace, &c.gpu.InterruptGrace},
		{"warm_timeout", s.WarmTimeout, defaultWarmTimeout, &c.gpu.WarmTimeout},
		{"unload_poll_interval", s.UnloadPollInterval, defaultUnloadPollInterval, &c.gpu.UnloadPoll},
		{"history_poll_interval", s.HistoryPollInterval, defaultHistoryPoll, &c.historyPoll},
		{"probe_timeout", s.ProbeTimeout, defaultProbeTimeout, &c.gpu.ProbeTimeout},
		{"backoff initial", s.BackoffInitial, defaultBackoffInitial, &c.gpu.BackoffInitial},
		{"backoff max", s.BackoffMax, defaultBackoffMax, &c.gpu.BackoffMax},
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
	if c.gpu.BackoffMax < c.gpu.BackoffInitial {
		return fmt.Errorf("backoff: max %v is less than initial %v", c.gpu.BackoffMax, c.gpu.BackoffInitial)
	}
	return nil
}

// validateLimits checks the sizes and counts.
func validateLimits(s Settings, c *config) error {
	switch {
	case s.PromptCaptureLimit < 0:
		return fmt.Errorf("prompt_capture_limit: %d is negative", s.PromptCaptureLimit)
	case s.PromptCaptureLimit == 0:
		c.captureLimit = defaultPromptCaptureLimit
	case s.PromptCaptureLimit < 64:
		return fmt.Errorf("prompt_capture_limit: %d bytes cannot hold a prompt_id (at least 64)", s.PromptCaptureLimit)
	case s.PromptCaptureLimit > maxPromptCaptureLimit:
		return fmt.Errorf("prompt_capture_limit: %d is over the 1GiB maximum", s.PromptCaptureLimit)
	default:
		c.captureLimit = s.PromptCaptureLimit
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

// validateVRAM picks the probe min_free_vram reads the card with.
func validateVRAM(s Settings, c *config) error {
	switch s.VRAMProbe {
	case "", "comfy":
		if s.MinFreeVRAM > 0 {
			if c.comfy == nil {
				return fmt.Errorf("min_free_vram: the comfy probe needs comfy (a comfyui engine) or vram_probe nvidia-smi")
			}
			c.gpu.Probe = gpu.ComfyProbe{Engine: c.comfyName, Client: c.comfy, Index: s.GPUIndex}
		}
	case "nvidia-smi":
		if s.MinFreeVRAM > 0 {
			// Looked for in PATH when the config loads (locate), never
			// while it is adapted: adapting does not depend on the host.
			c.gpu.Probe = gpu.SMIProbe{Index: s.GPUIndex}
		}
	default:
		return fmt.Errorf("vram_probe: %q is neither comfy nor nvidia-smi", s.VRAMProbe)
	}
	return nil
}

// locate finds what the settings need on this host, when the config
// loads: the nvidia-smi executable for vram_probe nvidia-smi.
func (c *config) locate() error {
	if p, ok := c.gpu.Probe.(gpu.SMIProbe); ok {
		path, err := exec.LookPath("nvidia-smi")
		if err != nil {
			return fmt.Errorf("vram_probe: nvidia-smi not found in PATH: %v", err)
		}
		p.Path = path
		c.gpu.Probe = p
	}
	c.locatePresence()
	return nil
}

// defaultRetryAfter is 30s, or with auto, job_timeout's default (the
// longest the GPU can be held by one job).
func defaultRetryAfter(s Settings) time.Duration {
	if s.BusyRetryAfterAuto {
		return defaultJobTimeout
	}
	return defaultBusyRetryAfter
}

// retryAfterSeconds is Retry-After in whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
