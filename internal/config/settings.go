package config

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
)

// Settings configure one turnstile: the GPU it guards and the engines that
// share it. Every duration accepts Caddy's duration syntax; a zero or
// absent value means the default.
type Settings struct {
	// Shorthands are the URLs of the classes' shorthand options, by
	// option: each gives its class's first engine, of the kind the option
	// stands for (the registry's Shorthand, docs/configuration.md). In
	// JSON each is a top-level string field named after its option; an
	// empty one disables that engine. At least one engine, by shorthand
	// or in llm or image, is required.
	Shorthands map[string]string `json:"-"`

	// More LLM engines, after the LLM shorthand's: Caddyfile `llm KIND
	// URL [{ name NAME }]`, repeatable. Every one is emptied, and the
	// emptying confirmed, before exclusive use.
	LLM []EngineSettings `json:"llm,omitempty"`

	// More image engines, after the image shorthand's: Caddyfile `image
	// KIND URL [{ name NAME }]`, repeatable.
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

	// WaitNotice sends a streaming chat request that waits for the GPU
	// notices in its own stream, every interval and at each change:
	// "on" (every 5s), "off" (default), or the interval. A handler's
	// wait_notice overrides it. Caddyfile: `wait_notice [INTERVAL|off]`.
	WaitNotice string `json:"wait_notice,omitempty"`

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

	// VRAMProbe reads the card's free memory for min_free_vram: the probe
	// of an image engine that reports it (its kind's Probe name, the
	// default when that engine is set; docs/configuration.md) or
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

	// VRAMAdmission turns memory-aware admission on: an LLM request for
	// a model that no LLM engine has loaded goes to the GPU only when the
	// card's free memory, less vram_reserve, covers the model's
	// footprint. Needs vram_probe nvidia-smi. Off by default.
	VRAMAdmission bool `json:"vram_admission,omitempty"`

	// VRAMReserve is how many bytes admission keeps free for the desktop,
	// a game, a display. Default 0; it must be under the card's total.
	VRAMReserve int64 `json:"vram_reserve,omitempty"`

	// How often the card's memory is read while something waits for it.
	// Default 1s.
	VRAMPollInterval caddy.Duration `json:"vram_poll_interval,omitempty"`

	// VRAMStale is what a request whose admission needs a reading of the
	// card does while the last one is stale (older than three
	// vram_poll_interval) or missing: "wait" (default) for a fresh one,
	// within llm_wait_timeout (the status shows it waiting_for
	// vram_reading; in reject mode it gets the busy answer), or "admit"
	// it as if vram_admission were off. A request for a loaded model
	// needs no reading.
	VRAMStale string `json:"vram_stale,omitempty"`

	// ModelVRAM are footprints in bytes, by model name, that override what
	// admission learns. Caddyfile: `model_vram MODEL SIZE`, repeatable.
	ModelVRAM map[string]int64 `json:"model_vram,omitempty"`

	// CoResident are the models that may run beside an image job when
	// they fit. Needs vram_admission. Caddyfile: `co_resident MODEL...`,
	// repeatable.
	CoResident []string `json:"co_resident,omitempty"`

	PresenceSettings
}

// UnmarshalJSON decodes the settings strictly (unknown fields are
// refused, as Caddy refuses them elsewhere), naming the field of any value
// it refuses: encoding/json names none for a duration that does not parse.
func (s *Settings) UnmarshalJSON(b []byte) error {
	type plain Settings // the fields, without this method
	rest, short, err := splitShorthands(b)
	if err != nil {
		return err
	}
	if err := DecodeFields(rest, (*plain)(s)); err != nil {
		return err
	}
	for opt, url := range short {
		s.SetShorthand(opt, url)
	}
	return nil
}

// EngineSettings configure one engine that shares the turnstile's GPU.
type EngineSettings struct {
	// The engine's kind, as the registry names it (docs/engines.md lists
	// the LLM and the image kinds).
	Kind string `json:"kind"`

	// The engine's URL, e.g. http://127.0.0.1:8080.
	URL string `json:"url"`

	// The engine's name in the turnstile: unique among its engines, used
	// by the status, the metrics' engine label and a handler's `engine`.
	// Default: its kind, so two engines of one kind need a name.
	Name string `json:"name,omitempty"`

	// Headers sent with every request the turnstile itself makes to the
	// engine (listing, unloading, sleeping and waking, probing, freeing):
	// its API key, e.g. {"Authorization": ["Bearer {env.LLAMA_SWAP_KEY}"]}.
	// Placeholders such as {env.NAME} are expanded when the config
	// loads. The values are never logged or shown in the status, and
	// requests that gpu_turnstile_proxy forwards do not carry them
	// (reverse_proxy's header_up does).
	Headers http.Header `json:"headers,omitempty"`
}
