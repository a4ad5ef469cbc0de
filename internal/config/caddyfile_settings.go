package config

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// parseSetting parses one option of the global gpu_turnstile block; d is
// on the option's name.
func parseSetting(d *caddyfile.Dispenser, s *Settings) error {
	opt := d.Val()
	if dst, ok := durationSettings(s)[opt]; ok {
		v, err := OneArg(d)
		if err != nil {
			return err
		}
		return parseDuration(d, opt, v, dst)
	}
	if isShorthand(opt) {
		var url string
		err := parseUpstream(d, &url)
		s.SetShorthand(opt, url)
		return err
	}
	parse, ok := settingParsers[opt]
	if !ok {
		return d.Errf("gpu_turnstile: unknown option %q", opt)
	}
	return parse(d, s)
}

// durationSettings are the options that take one duration.
func durationSettings(s *Settings) map[string]*caddy.Duration {
	return map[string]*caddy.Duration{
		"llm_wait_timeout":       &s.LLMWaitTimeout,
		"image_wait_timeout":     &s.ImageWaitTimeout,
		"unload_timeout":         &s.UnloadTimeout,
		"job_timeout":            &s.JobTimeout,
		"interrupt_grace":        &s.InterruptGrace,
		"free_timeout":           &s.FreeTimeout,
		"warm_timeout":           &s.WarmTimeout,
		"unload_poll_interval":   &s.UnloadPollInterval,
		"history_poll_interval":  &s.HistoryPollInterval,
		"probe_timeout":          &s.ProbeTimeout,
		"hold_release_after":     &s.HoldReleaseAfter,
		"presence_poll_interval": &s.PresencePollInterval,
		"vram_poll_interval":     &s.VRAMPollInterval,
	}
}

// settingParsers parse the options that are not a single duration.
var settingParsers = map[string]func(*caddyfile.Dispenser, *Settings) error{
	"llm":                func(d *caddyfile.Dispenser, s *Settings) error { return parseEngine(d, &s.LLM) },
	"image":              func(d *caddyfile.Dispenser, s *Settings) error { return parseEngine(d, &s.Image) },
	"hold_while":         parseHoldWhile,
	"presence_gpu_index": parsePresenceGPUIndex,
	"busy_retry_after":   parseBusyRetryAfter,
	"llm_busy_mode":      parseBusyMode,
	"llm_busy_status": func(d *caddyfile.Dispenser, s *Settings) error {
		return parseInt(d, 400, 599, &s.LLMBusyStatus, "a status from 400 to 599")
	},
	"warm_model": func(d *caddyfile.Dispenser, s *Settings) error {
		v, err := OneArg(d)
		s.WarmModel = v
		return err
	},
	"backoff": parseBackoff,
	"prompt_capture_limit": func(d *caddyfile.Dispenser, s *Settings) error {
		return parseSize(d, 64, MaxPromptCaptureLimit, &s.PromptCaptureLimit, "a size from 64B to 1GiB (e.g. 64KiB)")
	},
	"min_free_vram": func(d *caddyfile.Dispenser, s *Settings) error {
		return parseSize(d, 1, 1<<62, &s.MinFreeVRAM, "a size (e.g. 20GiB)")
	},
	"vram_probe": parseVRAMProbe,
	"early_unload": func(d *caddyfile.Dispenser, s *Settings) error {
		if d.NextArg() {
			return d.ArgErr()
		}
		s.EarlyUnload = true
		return nil
	},
	"max_image_streak": func(d *caddyfile.Dispenser, s *Settings) error {
		return parseInt(d, 0, 1<<31-1, &s.MaxImageStreak, "a whole number >= 0")
	},
	"wait_buffer_limit": func(d *caddyfile.Dispenser, s *Settings) error {
		return parseSize(d, 1, MaxWaitBufferLimit, &s.WaitBufferLimit, "a size from 1B to 1TiB (e.g. 256MiB)")
	},
	"max_waiting": func(d *caddyfile.Dispenser, s *Settings) error {
		return parseInt(d, 1, 1<<31-1, &s.MaxWaiting, "a whole number >= 1")
	},
	"vram_admission": func(d *caddyfile.Dispenser, s *Settings) error {
		if d.NextArg() {
			return d.ArgErr()
		}
		s.VRAMAdmission = true
		return nil
	},
	"vram_stale": func(d *caddyfile.Dispenser, s *Settings) error {
		if !d.NextArg() {
			return d.ArgErr()
		}
		s.VRAMStale = d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
		if s.VRAMStale != "wait" && s.VRAMStale != "admit" {
			return d.Errf("vram_stale: %q: want wait or admit", s.VRAMStale)
		}
		return nil
	},
	"vram_reserve": func(d *caddyfile.Dispenser, s *Settings) error {
		return parseSize(d, 0, MaxVRAMSize, &s.VRAMReserve, "a size >= 0 (e.g. 2GiB)")
	},
	"model_vram":  parseModelVRAM,
	"co_resident": parseCoResident,
	"wait_notice": func(d *caddyfile.Dispenser, s *Settings) error { return parseWaitNotice(d, &s.WaitNotice) },
}

// parseUpstream reads an engine's URL. An empty value (no argument, or an
// empty environment variable) disables that engine.
func parseUpstream(d *caddyfile.Dispenser, dst *string) error {
	opt := d.Val()
	var v string
	if d.NextArg() {
		v = d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	*dst = v
	if v != "" {
		if err := jsonhttp.CheckURL(v); err != nil {
			return d.Errf("%s: invalid URL %q: %v", opt, gpu.RedactURL(v), err)
		}
	}
	return nil
}

// parseEngine reads `llm|image KIND URL [{ name NAME; header NAME VALUE }]`. The kind, the
// URL and the name are checked when the settings are validated, with the
// rest of the turnstile's engines.
func parseEngine(d *caddyfile.Dispenser, dst *[]EngineSettings) error {
	opt := d.Val()
	args := d.RemainingArgs()
	if len(args) != 2 {
		return d.Errf("%s: want `%s KIND URL [{ name NAME }]`", opt, opt)
	}
	es := EngineSettings{Kind: args[0], URL: args[1]}
	if !IsKind(opt, es.Kind) {
		return d.Errf("%s: kind %q: want one of %s", opt, es.Kind, KindNames(opt))
	}
	if err := jsonhttp.CheckURL(es.URL); err != nil {
		return d.Errf("%s %s: invalid URL %q: %v", opt, es.Kind, gpu.RedactURL(es.URL), err)
	}
	seen := OptionLines{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		if d.Val() == "header" {
			if err := parseEngineHeader(d, &es); err != nil {
				return err
			}
			continue
		}
		if err := seen.Once(d); err != nil {
			return err
		}
		if d.Val() != "name" {
			return d.Errf("%s: unknown option %q (want name or header)", opt, d.Val())
		}
		v, err := OneArg(d)
		if err != nil {
			return err
		}
		if !ValidName(v) {
			return d.Errf("%s %s: name %q: %s", opt, es.Kind, v, NameRule)
		}
		es.Name = v
	}
	*dst = append(*dst, es)
	return nil
}

// parseEngineHeader reads `header NAME VALUE` in an engine's block: a
// header sent with every request the turnstile makes to that engine. Its
// value is never echoed in an error.
func parseEngineHeader(d *caddyfile.Dispenser, es *EngineSettings) error {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return d.Errf("header: want `header NAME VALUE`")
	}
	if err := checkHeaderName(args[0]); err != nil {
		return d.Errf("%v", err)
	}
	if args[1] == "" {
		return d.Errf("header %s: empty value", args[0])
	}
	if !validHeaderValue(args[1]) {
		return d.Errf("header %s: its value has a control character (a line break?)", args[0])
	}
	if es.Headers == nil {
		es.Headers = http.Header{}
	}
	es.Headers.Add(args[0], args[1])
	return nil
}

// parseBusyRetryAfter reads `busy_retry_after DURATION | auto [MAX]`.
func parseBusyRetryAfter(d *caddyfile.Dispenser, s *Settings) error {
	args := d.RemainingArgs()
	switch {
	case len(args) == 0:
		return d.Errf("busy_retry_after: missing value")
	case args[0] == "auto" && len(args) == 1:
		s.BusyRetryAfterAuto = true
		return nil
	case args[0] == "auto" && len(args) == 2:
		s.BusyRetryAfterAuto = true
		return parseDuration(d, "busy_retry_after auto", args[1], &s.BusyRetryAfter)
	case args[0] == "auto":
		return d.Errf("busy_retry_after: want `auto [MAX]` or one duration")
	case len(args) != 1:
		return d.Errf("busy_retry_after: one value expected, got more")
	}
	return parseDuration(d, "busy_retry_after", args[0], &s.BusyRetryAfter)
}

func parseBusyMode(d *caddyfile.Dispenser, s *Settings) error {
	v, err := OneArg(d)
	if err != nil {
		return err
	}
	if v != "wait" && v != "reject" {
		return d.Errf("llm_busy_mode: %q is neither wait nor reject", v)
	}
	s.LLMBusyMode = v
	return nil
}

// parseBackoff reads `backoff INITIAL MAX`.
func parseBackoff(d *caddyfile.Dispenser, s *Settings) error {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return d.Errf("backoff: want two durations, initial and max (e.g. backoff 1s 60s)")
	}
	if err := parseDuration(d, "backoff initial", args[0], &s.BackoffInitial); err != nil {
		return err
	}
	if err := parseDuration(d, "backoff max", args[1], &s.BackoffMax); err != nil {
		return err
	}
	if s.BackoffMax < s.BackoffInitial {
		return d.Errf("backoff: max %s is less than initial %s", args[1], args[0])
	}
	return nil
}

// parseVRAMProbe reads `vram_probe PROBE|nvidia-smi [GPU_INDEX]` (the
// engine probes as the registry of kinds has them).
func parseVRAMProbe(d *caddyfile.Dispenser, s *Settings) error {
	args := d.RemainingArgs()
	probes := append(kinds.Probes(), smiProbe)
	if len(args) < 1 || len(args) > 2 || !slices.Contains(probes, args[0]) {
		return d.Errf("vram_probe: want %s [GPU_INDEX]", strings.Join(probes, "|"))
	}
	s.VRAMProbe = args[0]
	if len(args) == 2 {
		n, err := strconv.Atoi(args[1])
		if err != nil || n < 0 {
			return d.Errf("vram_probe: GPU index %q is not a whole number >= 0", args[1])
		}
		s.GPUIndex = n
	}
	return nil
}

// parseSize reads one size (e.g. 64KiB) from lo to hi bytes; want says
// what a valid value is, for the error.
func parseSize(d *caddyfile.Dispenser, lo, hi uint64, dst *int64, want string) error {
	opt := d.Val()
	v, err := OneArg(d)
	if err != nil {
		return err
	}
	n, err := humanize.ParseBytes(v)
	if err != nil || n < lo || n > hi {
		return d.Errf("%s: %q is not %s", opt, v, want)
	}
	*dst = int64(n)
	return nil
}

// parseInt reads one whole number from lo to hi.
func parseInt(d *caddyfile.Dispenser, lo, hi int, dst *int, want string) error {
	opt := d.Val()
	v, err := OneArg(d)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return d.Errf("%s: %q is not %s", opt, v, want)
	}
	*dst = n
	return nil
}

// modelLinesKey is the dispenser's context key of the lines of the models
// model_vram and co_resident name in the block being parsed, so that a
// model given twice is an error naming both lines.
const modelLinesKey = "gpu_turnstile.model_lines"

// onceModel fails when option opt named model before in the block.
func onceModel(d *caddyfile.Dispenser, opt, model, twice string) error {
	lines, _ := d.GetContext(modelLinesKey).(map[string]int)
	if lines == nil {
		lines = map[string]int{}
		d.SetContext(modelLinesKey, lines)
	}
	key := opt + "\x00" + model
	if line, dup := lines[key]; dup {
		return d.Errf("%s: model %q %s twice, on lines %d and %d", opt, model, twice, line, d.Line())
	}
	lines[key] = d.Line()
	return nil
}

// parseModelVRAM reads `model_vram MODEL SIZE`, repeatable, one line per
// model.
func parseModelVRAM(d *caddyfile.Dispenser, s *Settings) error {
	args := d.RemainingArgs()
	if len(args) != 2 {
		return d.Errf("model_vram: want `model_vram MODEL SIZE` (e.g. model_vram llama3.1:8b 6GiB)")
	}
	model, v := args[0], args[1]
	if model == "" {
		return d.Errf("model_vram: empty model name")
	}
	n, err := humanize.ParseBytes(v)
	if err != nil || n < 1 || n > MaxVRAMSize {
		return d.Errf("model_vram: %s: %q is not a size > 0 (e.g. 6GiB)", model, v)
	}
	if err := onceModel(d, "model_vram", model, "given"); err != nil {
		return err
	}
	if s.ModelVRAM == nil {
		s.ModelVRAM = map[string]int64{}
	}
	s.ModelVRAM[model] = int64(n)
	return nil
}

// parseCoResident reads `co_resident MODEL...`, repeatable: each line adds
// its models.
func parseCoResident(d *caddyfile.Dispenser, s *Settings) error {
	models := d.RemainingArgs()
	if len(models) == 0 {
		return d.Errf("co_resident: name at least one model")
	}
	for _, m := range models {
		if m == "" {
			return d.Errf("co_resident: empty model name")
		}
		if err := onceModel(d, "co_resident", m, "listed"); err != nil {
			return err
		}
	}
	s.CoResident = append(s.CoResident, models...)
	return nil
}
