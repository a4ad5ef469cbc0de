package config

import (
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/presence"
)

// The syntax of each hold_while condition, for the errors.
const (
	gpuProcessSyntax = "`gpu_process [except NAME...]` (include_desktop before except counts the desktop's processes)"
	gpuBusySyntax    = "`gpu_busy [PERCENT] [for DURATION] [include_desktop] [except NAME...]`"
	steamSyntax      = "`steam [home PATH]`"
)

// parseHoldWhile reads `hold_while process NAME...`, `hold_while
// gpu_process [include_desktop] [except NAME...]`, `hold_while gpu_busy
// [PERCENT] [for DURATION] [include_desktop] [except NAME...]` and
// `hold_while steam [home PATH]`.
func parseHoldWhile(d *caddyfile.Dispenser, s *Settings) error {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.Errf("hold_while: want `process NAME...`, %s, %s or %s", gpuProcessSyntax, gpuBusySyntax, steamSyntax)
	}
	switch args[0] {
	case "process":
		if len(args) < 2 {
			return d.Errf("hold_while process: name at least one process (a glob, e.g. steam or *.exe)")
		}
		if _, err := presence.Processes(args[1:]); err != nil {
			return d.Errf("hold_while process: %v", err)
		}
		s.HoldWhileProcess = append(s.HoldWhileProcess, args[1:]...)
		return nil
	case "gpu_process":
		if s.HoldWhileGPUProcess {
			return d.Errf("hold_while gpu_process: given twice")
		}
		s.HoldWhileGPUProcess = true
		return parseGPUWords(d, "gpu_process", gpuProcessSyntax, args[1:],
			gpuWords{includeDesktop: &s.HoldWhileGPUIncludeDesktop, except: &s.HoldWhileGPUExcept})
	case "gpu_busy":
		if s.HoldWhileGPUBusy {
			return d.Errf("hold_while gpu_busy: given twice")
		}
		s.HoldWhileGPUBusy = true
		return parseGPUWords(d, "gpu_busy", gpuBusySyntax, args[1:], gpuWords{percent: &s.HoldWhileGPUBusyPercent,
			dur: &s.HoldWhileGPUBusyFor, includeDesktop: &s.HoldWhileGPUBusyIncludeDesktop, except: &s.HoldWhileGPUBusyExcept})
	case "steam":
		return parseSteam(d, s, args[1:])
	}
	return d.Errf("hold_while: %q is neither process, gpu_process, gpu_busy nor steam", args[0])
}

// gpuWords are where a GPU condition's words go; nil for a word it does
// not take.
type gpuWords struct {
	percent        *int
	dur            *caddy.Duration
	includeDesktop *bool
	except         *[]string
}

// parseGPUWords reads a GPU condition's words after its name: a PERCENT
// first, `for DURATION`, `include_desktop`, and `except NAME...` last.
func parseGPUWords(d *caddyfile.Dispenser, cond, syntax string, args []string, w gpuWords) error {
	for i := 0; i < len(args); i++ {
		word := args[i]
		switch {
		case word == "except" && len(args) > i+1:
			if err := presence.CheckGlobs(args[i+1:]); err != nil {
				return d.Errf("hold_while %s: except: %v", cond, err)
			}
			*w.except = append(*w.except, args[i+1:]...)
			return nil
		case word == "include_desktop" && !*w.includeDesktop:
			*w.includeDesktop = true
		case word == "for" && w.dur != nil && *w.dur == 0 && len(args) > i+1:
			i++
			if err := parseDuration(d, "hold_while "+cond+" for", args[i], w.dur); err != nil {
				return err
			}
		case i == 0 && w.percent != nil && isNumber(word):
			n, err := strconv.Atoi(strings.TrimSuffix(word, "%"))
			if err != nil || n < 1 || n > 100 {
				return d.Errf("hold_while %s: PERCENT %q is not a whole number from 1 to 100", cond, word)
			}
			*w.percent = n
		default:
			return d.Errf("hold_while %s: want %s, got %q at %q", cond, syntax, strings.Join(args, " "), word)
		}
	}
	return nil
}

// isNumber reports a word that is meant as a number (digits, a sign, a
// trailing %), valid or not.
func isNumber(word string) bool {
	return strings.Trim(word, "+-0123456789.%") == ""
}

// parseSteam reads `steam [home PATH]`.
func parseSteam(d *caddyfile.Dispenser, s *Settings, args []string) error {
	if s.HoldWhileSteam {
		return d.Errf("hold_while steam: given twice")
	}
	s.HoldWhileSteam = true
	switch {
	case len(args) == 0:
		return nil
	case len(args) == 2 && args[0] == "home":
		s.HoldWhileSteamHome = args[1]
		return nil
	}
	return d.Errf("hold_while steam: want %s, got %q", steamSyntax, strings.Join(args, " "))
}

// parsePresenceGPUIndex reads `presence_gpu_index N`.
func parsePresenceGPUIndex(d *caddyfile.Dispenser, s *Settings) error {
	n := 0
	if err := parseInt(d, 0, 1<<20, &n, "a GPU index (a whole number, 0 or more)"); err != nil {
		return err
	}
	s.PresenceGPUIndex = &n
	return nil
}
