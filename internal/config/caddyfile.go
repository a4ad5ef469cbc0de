package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// DefaultName is the turnstile a handler uses when it names none, and the
// name of a global option that gives none.
const DefaultName = "default"

// OrDefault is a handler's turnstile name as it is meant: DefaultName
// when it names none.
func OrDefault(name string) string {
	if name == "" {
		return DefaultName
	}
	return name
}

// ParseGlobalOption parses a global gpu_turnstile option, d on its name,
// into the turnstile's name and settings, validated; defined reports
// whether a name is already taken (an option may appear once per name).
// The options are those parseSetting knows (docs/configuration.md lists them):
//
//	gpu_turnstile [NAME] {
//		OPTION VALUE...
//	}
//
// An option given twice is an error naming both lines.
func ParseGlobalOption(d *caddyfile.Dispenser, defined func(name string) bool) (string, *Settings, error) {
	d.Next() // the option's name
	name := DefaultName
	if d.NextArg() {
		name = d.Val()
		if !ValidName(name) {
			return "", nil, d.Errf("gpu_turnstile: invalid turnstile name %q: %s", name, NameRule)
		}
		if d.NextArg() {
			return "", nil, d.ArgErr()
		}
	}
	if defined(name) {
		return "", nil, d.Errf("gpu_turnstile: turnstile %q is defined twice", name)
	}
	s := &Settings{}
	at := blockLines{seen: OptionLines{}, file: d.File()}
	d.SetContext(modelLinesKey, map[string]int{}) // this block's, not a previous one's
	for d.NextBlock(0) {
		if err := at.seen.Once(d); err != nil {
			return "", nil, err
		}
		at.note(d)
		if err := parseSetting(d, s); err != nil {
			return "", nil, err
		}
	}
	if _, err := Validate(*s); err != nil {
		// A check across options is reported at the option at fault,
		// not at the block's closing brace.
		if line, ok := at.lineOf(err, s); ok {
			return "", nil, fmt.Errorf("gpu_turnstile %s: %w, at %s:%d", name, err, at.file, line)
		}
		return "", nil, d.Errf("gpu_turnstile %s: %v", name, err)
	}
	return name, s, nil
}

// OneArg reads the one value of the option d is on.
func OneArg(d *caddyfile.Dispenser) (string, error) {
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

// parseDuration reads a positive duration v of opt into dst.
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

// OptionLines remembers the line of each option of one block, so that an
// option given twice is an error naming both lines.
type OptionLines map[string]int

// repeatable are the options that may be given more than once.
var repeatable = map[string]bool{
	"llm": true, "image": true, "hold_while": true, "trusted_origins": true,
	"model_vram": true, "co_resident": true,
}

// Once fails when the option d is on was given before in the block. Of a
// repeatable option, the first line is kept (a check across options is
// reported there).
func (o OptionLines) Once(d *caddyfile.Dispenser) error {
	if repeatable[d.Val()] {
		if _, ok := o[d.Val()]; !ok {
			o[d.Val()] = d.Line()
		}
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
	seen OptionLines
	file string
	// The lines of the engine options by class, shorthand apart: the
	// order the settings list them in depends on both (engineList).
	shorthand    map[string]int   // by shorthand option
	engineOption map[string][]int // llm, image
	holdWhile    map[string]int   // each hold_while, by its condition
}

func (b *blockLines) note(d *caddyfile.Dispenser) {
	opt, line := d.Val(), d.Line()
	switch {
	case isShorthand(opt):
		if b.shorthand == nil {
			b.shorthand = map[string]int{}
		}
		b.shorthand[opt] = line
	case opt == LLM || opt == Image:
		if b.engineOption == nil {
			b.engineOption = map[string][]int{}
		}
		b.engineOption[opt] = append(b.engineOption[opt], line)
	case opt == "hold_while":
		if b.holdWhile == nil {
			b.holdWhile = map[string]int{}
		}
		if d.NextArg() {
			b.holdWhile[d.Val()] = line
			d.Prev()
		}
	}
}

// holdWhileFields are the JSON field prefixes of the hold_while
// conditions, longest first (hold_while_gpu_ is gpu_process's).
var holdWhileFields = []struct{ prefix, condition string }{
	{"hold_while_gpu_busy", "gpu_busy"},
	{"hold_while_steam", "steam"},
	{"hold_while_process", "process"},
	{"hold_while_gpu", "gpu_process"},
}

// holdWhileLine is the line of the hold_while condition whose JSON field
// is field.
func (b *blockLines) holdWhileLine(field string) (int, bool) {
	for _, f := range holdWhileFields {
		if strings.HasPrefix(field, f.prefix) {
			line, ok := b.holdWhile[f.condition]
			return line, ok
		}
	}
	return 0, false
}

// lineOf is the line of the option err is about: an engine's by its place
// among its class's engines, any other by the option that begins the
// message (settings errors begin with the option's name).
func (b *blockLines) lineOf(err error, s *Settings) (int, bool) {
	var ee *EngineError
	if errors.As(err, &ee) {
		lines := b.engineOption[ee.Class]
		short := shorthandOption(ee.Class)
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
	if line, ok := b.holdWhileLine(opt); ok {
		return line, true
	}
	if line, ok := b.shorthand[opt]; ok {
		return line, true
	}
	line, ok := b.seen[opt]
	return line, ok
}
