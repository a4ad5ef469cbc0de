package turnstile

import (
	"encoding/json"
	"regexp"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("gpu_turnstile", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("gpu_turnstile", parseHandler)
	httpcaddyfile.RegisterHandlerDirective("gpu_turnstile_status", parseStatusHandler)
	// After the auth directives (a request that will be refused never
	// queues for the GPU) and after encode (the prompt_id capture reads
	// uncompressed bytes); before handle and route, so it also guards a
	// reverse_proxy inside them.
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile", httpcaddyfile.After, "encode")
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile_status", httpcaddyfile.Before, "respond")
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// parseGlobalOption parses the global option; it may appear once per
// turnstile name:
//
//	gpu_turnstile [NAME] {
//		ollama                URL            # empty or absent: Ollama consumer disabled
//		comfy                 URL            # empty or absent: ComfyUI consumer disabled
//		llm_busy_mode         wait|reject
//		llm_busy_status       400-599
//		busy_retry_after      DURATION | auto [MAX]
//		llm_wait_timeout      DURATION
//		unload_timeout        DURATION
//		job_timeout           DURATION
//		interrupt_grace       DURATION
//		free_timeout          DURATION
//		warm_model            MODEL
//		warm_timeout          DURATION
//		unload_poll_interval  DURATION
//		history_poll_interval DURATION
//		probe_timeout         DURATION
//		backoff               INITIAL MAX
//		prompt_capture_limit  SIZE
//		max_image_streak      N
//		min_free_vram         SIZE
//		vram_probe            comfy|nvidia-smi [GPU_INDEX]
//		early_unload
//		wait_buffer_limit     SIZE
//		max_waiting           N
//	}
//
// An option given twice is an error naming both lines.
func parseGlobalOption(d *caddyfile.Dispenser, existing any) (any, error) {
	app := &App{Turnstiles: map[string]*Settings{}}
	if prev, ok := existing.(httpcaddyfile.App); ok {
		if err := json.Unmarshal(prev.Value, app); err != nil {
			return nil, err
		}
	}
	d.Next() // the option's name
	name := defaultName
	if d.NextArg() {
		name = d.Val()
		if !nameRE.MatchString(name) {
			return nil, d.Errf("gpu_turnstile: invalid turnstile name %q (letters, digits, '_', '-', '.')", name)
		}
		if d.NextArg() {
			return nil, d.ArgErr()
		}
	}
	if _, dup := app.Turnstiles[name]; dup {
		return nil, d.Errf("gpu_turnstile: turnstile %q is defined twice", name)
	}
	s := &Settings{}
	seen := map[string]int{} // option -> line
	for d.NextBlock(0) {
		if line, dup := seen[d.Val()]; dup {
			return nil, d.Errf("%s: given twice, on lines %d and %d", d.Val(), line, d.Line())
		}
		seen[d.Val()] = d.Line()
		if err := parseSetting(d, s); err != nil {
			return nil, err
		}
	}
	if _, err := s.validate(); err != nil {
		return nil, d.Errf("gpu_turnstile %s: %v", name, err)
	}
	app.Turnstiles[name] = s
	return httpcaddyfile.App{Name: "gpu_turnstile", Value: caddyconfig.JSON(app, nil)}, nil
}

func parseSetting(d *caddyfile.Dispenser, s *Settings) error {
	opt := d.Val()
	durations := map[string]*caddy.Duration{
		"busy_retry_after":      &s.BusyRetryAfter,
		"llm_wait_timeout":      &s.LLMWaitTimeout,
		"unload_timeout":        &s.UnloadTimeout,
		"job_timeout":           &s.JobTimeout,
		"interrupt_grace":       &s.InterruptGrace,
		"free_timeout":          &s.FreeTimeout,
		"warm_timeout":          &s.WarmTimeout,
		"unload_poll_interval":  &s.UnloadPollInterval,
		"history_poll_interval": &s.HistoryPollInterval,
		"probe_timeout":         &s.ProbeTimeout,
	}
	if opt == "busy_retry_after" {
		args := d.RemainingArgs()
		if len(args) == 0 {
			return d.Errf("busy_retry_after: missing value")
		}
		if args[0] == "auto" {
			s.BusyRetryAfterAuto = true
			switch len(args) {
			case 1:
				return nil
			case 2:
				return parseDuration(d, "busy_retry_after auto", args[1], &s.BusyRetryAfter)
			}
			return d.Errf("busy_retry_after: want `auto [MAX]` or one duration")
		}
		if len(args) != 1 {
			return d.Errf("busy_retry_after: one value expected, got more")
		}
		return parseDuration(d, opt, args[0], &s.BusyRetryAfter)
	}
	if dst, ok := durations[opt]; ok {
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		return parseDuration(d, opt, v, dst)
	}
	switch opt {
	case "ollama", "comfy":
		// An empty value (no argument, or an empty environment variable)
		// disables the consumer.
		var v string
		if d.NextArg() {
			v = d.Val()
			if d.NextArg() {
				return d.ArgErr()
			}
		}
		if opt == "ollama" {
			s.Ollama = v
		} else {
			s.Comfy = v
		}
		if v != "" {
			if _, err := (Settings{Ollama: v}).validate(); err != nil {
				return d.Errf("%s: invalid URL %q: want http(s)://host:port", opt, v)
			}
		}
	case "llm_busy_mode":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		if v != "wait" && v != "reject" {
			return d.Errf("llm_busy_mode: %q is neither wait nor reject", v)
		}
		s.LLMBusyMode = v
	case "llm_busy_status":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 400 || n > 599 {
			return d.Errf("llm_busy_status: %q is not a status from 400 to 599", v)
		}
		s.LLMBusyStatus = n
	case "warm_model":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		s.WarmModel = v
	case "backoff":
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
	case "prompt_capture_limit":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		n, err := humanize.ParseBytes(v)
		if err != nil || n < 64 || n > maxPromptCaptureLimit {
			return d.Errf("prompt_capture_limit: %q is not a size from 64B to 1GiB (e.g. 64KiB)", v)
		}
		s.PromptCaptureLimit = int64(n)
	case "min_free_vram":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		n, err := humanize.ParseBytes(v)
		if err != nil || n == 0 {
			return d.Errf("min_free_vram: %q is not a size (e.g. 20GiB)", v)
		}
		s.MinFreeVRAM = int64(n)
	case "vram_probe":
		args := d.RemainingArgs()
		if len(args) < 1 || len(args) > 2 || (args[0] != "comfy" && args[0] != "nvidia-smi") {
			return d.Errf("vram_probe: want comfy|nvidia-smi [GPU_INDEX]")
		}
		s.VRAMProbe = args[0]
		if len(args) == 2 {
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 0 {
				return d.Errf("vram_probe: GPU index %q is not a whole number >= 0", args[1])
			}
			s.GPUIndex = n
		}
	case "early_unload":
		if d.NextArg() {
			return d.ArgErr()
		}
		s.EarlyUnload = true
	case "max_image_streak":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return d.Errf("max_image_streak: %q is not a whole number >= 0", v)
		}
		s.MaxImageStreak = n
	case "wait_buffer_limit":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		n, err := humanize.ParseBytes(v)
		if err != nil || n == 0 || n > maxWaitBufferLimit {
			return d.Errf("wait_buffer_limit: %q is not a size from 1B to 1TiB (e.g. 256MiB)", v)
		}
		s.WaitBufferLimit = int64(n)
	case "max_waiting":
		v, err := oneArg(d)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return d.Errf("max_waiting: %q is not a whole number >= 1", v)
		}
		s.MaxWaiting = n
	default:
		return d.Errf("gpu_turnstile: unknown option %q", opt)
	}
	return nil
}

func oneArg(d *caddyfile.Dispenser) (string, error) {
	opt := d.Val()
	if !d.NextArg() {
		return "", d.Errf("%s: missing value", opt)
	}
	v := d.Val()
	if d.NextArg() {
		return "", d.Errf("%s: one value expected, got more", opt)
	}
	return v, nil
}

func parseDuration(d *caddyfile.Dispenser, opt, v string, dst *caddy.Duration) error {
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return d.Errf("%s: invalid duration %q: %v", opt, v, err)
	}
	if dur <= 0 {
		return d.Errf("%s: %s must be positive", opt, time.Duration(dur))
	}
	*dst = caddy.Duration(dur)
	return nil
}

// parseHandler parses the middleware directive:
//
//	gpu_turnstile [<matcher>] [auto|llm|image|passthrough] {
//		turnstile  NAME
//		during_job allow|reject
//	}
func parseHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	hd := new(Handler)
	h.Next() // the directive's name
	if h.NextArg() {
		if _, err := parseClass(h.Val()); err != nil {
			return nil, h.Errf("gpu_turnstile: %v", err)
		}
		hd.Class = h.Val()
		if h.NextArg() {
			return nil, h.ArgErr()
		}
	}
	seen := map[string]int{} // option -> line
	for h.NextBlock(0) {
		if line, dup := seen[h.Val()]; dup {
			return nil, h.Errf("%s: given twice, on lines %d and %d", h.Val(), line, h.Line())
		}
		seen[h.Val()] = h.Line()
		switch h.Val() {
		case "turnstile":
			v, err := oneArg(h.Dispenser)
			if err != nil {
				return nil, err
			}
			hd.Turnstile = v
		case "during_job":
			v, err := oneArg(h.Dispenser)
			if err != nil {
				return nil, err
			}
			if v != "allow" && v != "reject" {
				return nil, h.Errf("during_job: %q is neither allow nor reject", v)
			}
			hd.DuringJob = v
		default:
			return nil, h.Errf("gpu_turnstile: unknown option %q", h.Val())
		}
	}
	if err := checkTurnstileName(h, hd.Turnstile); err != nil {
		return nil, err
	}
	return hd, nil
}

// parseStatusHandler parses:
//
//	gpu_turnstile_status [NAME]
func parseStatusHandler(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	sh := new(StatusHandler)
	h.Next()
	if h.NextArg() {
		sh.Turnstile = h.Val()
		if h.NextArg() {
			return nil, h.ArgErr()
		}
	}
	seen := map[string]int{} // option -> line
	for h.NextBlock(0) {
		if line, dup := seen[h.Val()]; dup {
			return nil, h.Errf("%s: given twice, on lines %d and %d", h.Val(), line, h.Line())
		}
		seen[h.Val()] = h.Line()
		switch h.Val() {
		case "turnstile":
			v, err := oneArg(h.Dispenser)
			if err != nil {
				return nil, err
			}
			sh.Turnstile = v
		default:
			return nil, h.Errf("gpu_turnstile_status: unknown option %q", h.Val())
		}
	}
	if err := checkTurnstileName(h, sh.Turnstile); err != nil {
		return nil, err
	}
	return sh, nil
}

// checkTurnstileName fails adaptation when a handler names a turnstile
// that the global options do not define.
func checkTurnstileName(h httpcaddyfile.Helper, name string) error {
	if name == "" {
		name = defaultName
	}
	opt, ok := h.Option("gpu_turnstile").(httpcaddyfile.App)
	if !ok {
		return h.Errf("%s: no turnstile named %q: add the global option `gpu_turnstile { ollama URL comfy URL }`", h.Val(), name)
	}
	var app App
	if err := json.Unmarshal(opt.Value, &app); err != nil {
		return err
	}
	if _, ok := app.Turnstiles[name]; !ok {
		return h.Errf("no turnstile named %q in the global gpu_turnstile options", name)
	}
	return nil
}
