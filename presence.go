package turnstile

import (
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/presence"
)

// parseHoldWhile reads `hold_while process NAME...` and `hold_while
// gpu_process [except NAME...]`.
func parseHoldWhile(d *caddyfile.Dispenser, s *Settings) error {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.Errf("hold_while: want `process NAME...` or `gpu_process [except NAME...]`")
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
	case "gpu_process":
		if s.HoldWhileGPUProcess {
			return d.Errf("hold_while gpu_process: given twice")
		}
		s.HoldWhileGPUProcess = true
		if len(args) > 1 {
			if args[1] != "except" || len(args) < 3 {
				return d.Errf("hold_while gpu_process: want `gpu_process [except NAME...]`, got %q", strings.Join(args[1:], " "))
			}
			s.HoldWhileGPUExcept = append(s.HoldWhileGPUExcept, args[2:]...)
		}
	default:
		return d.Errf("hold_while: %q is neither process nor gpu_process", args[0])
	}
	return nil
}
