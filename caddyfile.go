package turnstile

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("gpu_turnstile", parseGlobalOption)
	httpcaddyfile.RegisterHandlerDirective("gpu_turnstile", parseDirective(func() *Handler { return new(Handler) }))
	httpcaddyfile.RegisterHandlerDirective("gpu_turnstile_status", parseDirective(func() *StatusHandler { return new(StatusHandler) }))
	httpcaddyfile.RegisterHandlerDirective("gpu_turnstile_holds", parseDirective(func() *HoldsHandler { return new(HoldsHandler) }))
	// After the auth directives (a request that will be refused never
	// queues for the GPU) and after encode (the prompt_id capture reads
	// uncompressed bytes); before handle and route, so it also guards a
	// reverse_proxy inside them.
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile", httpcaddyfile.After, "encode")
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile_status", httpcaddyfile.Before, "respond")
	// Like the status: a responder, after the auth directives that guard it.
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile_holds", httpcaddyfile.Before, "respond")
}

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
//		image_wait_timeout    DURATION
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
		if !tcfg.ValidName(name) {
			return nil, d.Errf("gpu_turnstile: invalid turnstile name %q: %s", name, tcfg.NameRule)
		}
		if d.NextArg() {
			return nil, d.ArgErr()
		}
	}
	if _, dup := app.Turnstiles[name]; dup {
		return nil, d.Errf("gpu_turnstile: turnstile %q is defined twice", name)
	}
	s := &Settings{}
	at := blockLines{seen: optionLines{}, file: d.File()}
	for d.NextBlock(0) {
		if err := at.seen.once(d); err != nil {
			return nil, err
		}
		at.note(d.Val(), d.Line())
		if err := parseSetting(d, s); err != nil {
			return nil, err
		}
	}
	if _, err := tcfg.Validate(*s); err != nil {
		// A check across options is reported at the option at fault,
		// not at the block's closing brace.
		if line, ok := at.lineOf(err, s); ok {
			return nil, fmt.Errorf("gpu_turnstile %s: %w, at %s:%d", name, err, at.file, line)
		}
		return nil, d.Errf("gpu_turnstile %s: %v", name, err)
	}
	app.Turnstiles[name] = s
	return httpcaddyfile.App{Name: "gpu_turnstile", Value: caddyconfig.JSON(app, nil)}, nil
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

// turnstileHandler is a handler module that names a turnstile.
type turnstileHandler interface {
	caddyhttp.MiddlewareHandler
	caddyfile.Unmarshaler
	turnstileName() string
}

// parseDirective returns the parser of a handler's directive: a new
// handler from newHandler, filled by its UnmarshalCaddyfile, whose
// turnstile must be defined.
func parseDirective[H turnstileHandler](newHandler func() H) httpcaddyfile.UnmarshalHandlerFunc {
	return func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		m := newHandler()
		if err := m.UnmarshalCaddyfile(h.Dispenser); err != nil {
			return nil, err
		}
		s, err := checkTurnstileName(h, m.turnstileName())
		if err != nil {
			return nil, err
		}
		if e, ok := any(m).(interface{ engineName() string }); ok && e.engineName() != "" && !s.HasImageEngine(e.engineName()) {
			return nil, h.Errf("engine %q: turnstile %q has no image engine of that name", e.engineName(), orDefault(m.turnstileName()))
		}
		return m, nil
	}
}

func (hd *Handler) turnstileName() string       { return hd.Turnstile }
func (hd *Handler) engineName() string          { return hd.Engine }
func (sh *StatusHandler) turnstileName() string { return sh.Turnstile }

// UnmarshalCaddyfile implements caddyfile.Unmarshaler:
//
//	gpu_turnstile [<matcher>] [auto|llm|image|passthrough] {
//		turnstile  NAME
//		engine     NAME
//		during_job allow|reject
//	}
func (hd *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		if _, err := parseClass(d.Val()); err != nil {
			return d.Errf("gpu_turnstile: %v", err)
		}
		hd.Class = d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	seen := optionLines{}
	for d.NextBlock(0) {
		if err := seen.once(d); err != nil {
			return err
		}
		switch d.Val() {
		case "turnstile":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			hd.Turnstile = v
		case "engine":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			hd.Engine = v
		case "during_job":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			if v != "allow" && v != "reject" {
				return d.Errf("during_job: %q is neither allow nor reject", v)
			}
			hd.DuringJob = v
		default:
			return d.Errf("gpu_turnstile: unknown option %q", d.Val())
		}
	}
	return nil
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler:
//
//	gpu_turnstile_status [NAME] {
//		turnstile       NAME
//		controls
//		trusted_origins URL...
//	}
func (sh *StatusHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return unmarshalSiteRoute(d, &sh.Turnstile, &sh.TrustedOrigins, map[string]*bool{"controls": &sh.Controls})
}

// unmarshalSiteRoute parses a directive of a site's routes into one
// turnstile: the turnstile it names (as its argument or as the turnstile
// option), the origins it trusts (trusted_origins, repeatable), and
// options that take no argument and set a flag.
func unmarshalSiteRoute(d *caddyfile.Dispenser, name *string, origins *[]string, flags map[string]*bool) error {
	d.Next() // the directive's name
	directive := d.Val()
	if d.NextArg() {
		*name = d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	seen := optionLines{}
	for d.NextBlock(0) {
		if err := seen.once(d); err != nil {
			return err
		}
		switch opt := d.Val(); opt {
		case "turnstile":
			v, err := oneArg(d)
			if err != nil {
				return err
			}
			*name = v
		case "trusted_origins":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Errf("%s: trusted_origins: want one or more origins, such as https://app.example.com", directive)
			}
			for _, o := range args {
				if _, err := httpapi.ParseOrigin(o); err != nil {
					return d.Errf("%s: trusted_origins: %v", directive, err)
				}
			}
			*origins = append(*origins, args...)
		default:
			flag, ok := flags[opt]
			if !ok {
				return d.Errf("%s: unknown option %q", directive, opt)
			}
			if d.NextArg() {
				return d.Errf("%s: %s takes no argument", directive, opt)
			}
			*flag = true
		}
	}
	return nil
}

// optionLines remembers the line of each option of one block, so that an
// option given twice is an error naming both lines.
type optionLines map[string]int

// repeatable are the options that may be given more than once.
var repeatable = map[string]bool{"llm": true, "image": true, "hold_while": true, "trusted_origins": true}

func (o optionLines) once(d *caddyfile.Dispenser) error {
	if repeatable[d.Val()] {
		return nil
	}
	if line, dup := o[d.Val()]; dup {
		return d.Errf("%s: given twice, on lines %d and %d", d.Val(), line, d.Line())
	}
	o[d.Val()] = d.Line()
	return nil
}

// blockLines are the lines of a global gpu_turnstile block's options,
// to report a check across options at the option it is about.
type blockLines struct {
	seen optionLines
	file string
	// The lines of the engine options by class, shorthand apart: the
	// order the settings list them in depends on both (engineList).
	shorthand    map[string]int   // ollama, comfy
	engineOption map[string][]int // llm, image
	holdWhile    int              // the first hold_while
}

func (b *blockLines) note(opt string, line int) {
	switch opt {
	case "ollama", "comfy":
		if b.shorthand == nil {
			b.shorthand = map[string]int{}
		}
		b.shorthand[opt] = line
	case "llm", "image":
		if b.engineOption == nil {
			b.engineOption = map[string][]int{}
		}
		b.engineOption[opt] = append(b.engineOption[opt], line)
	case "hold_while":
		if b.holdWhile == 0 {
			b.holdWhile = line
		}
	}
}

// lineOf is the line of the option err is about: an engine's by its place
// among its class's engines, any other by the option that begins the
// message (settings errors begin with the option's name).
func (b *blockLines) lineOf(err error, s *Settings) (int, bool) {
	var ee *tcfg.EngineError
	if errors.As(err, &ee) {
		lines := b.engineOption[ee.Class]
		short := map[string]string{"llm": "ollama", "image": "comfy"}[ee.Class]
		if line, ok := b.shorthand[short]; ok && s.Shorthand(ee.Class) != "" {
			lines = append([]int{line}, lines...)
		}
		if ee.Index < len(lines) {
			return lines[ee.Index], true
		}
		return 0, false
	}
	opt, _, _ := strings.Cut(err.Error(), ":")
	if f := strings.Fields(opt); len(f) > 0 {
		opt = f[0]
	}
	if strings.HasPrefix(opt, "hold_while") && b.holdWhile > 0 {
		return b.holdWhile, true
	}
	if line, ok := b.shorthand[opt]; ok {
		return line, true
	}
	line, ok := b.seen[opt]
	return line, ok
}

// checkTurnstileName fails adaptation when a handler names a turnstile
// that the global options do not define, and returns its settings.
func checkTurnstileName(h httpcaddyfile.Helper, name string) (*Settings, error) {
	name = orDefault(name)
	opt, ok := h.Option("gpu_turnstile").(httpcaddyfile.App)
	if !ok {
		return nil, h.Errf("%s: no turnstile named %q: add the global option `gpu_turnstile { ollama URL comfy URL }`", h.Val(), name)
	}
	var app App
	if err := json.Unmarshal(opt.Value, &app); err != nil {
		return nil, err
	}
	s, ok := app.Turnstiles[name]
	if !ok {
		return nil, h.Errf("no turnstile named %q in the global gpu_turnstile options", name)
	}
	return s, nil
}

// orDefault is a handler's turnstile name as messages say it.
func orDefault(name string) string {
	if name == "" {
		return defaultName
	}
	return name
}

// Interface guards
var (
	_ caddyfile.Unmarshaler = (*Handler)(nil)
	_ caddyfile.Unmarshaler = (*StatusHandler)(nil)
)
