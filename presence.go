package turnstile

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/presence"
)

// PresenceSettings are the conditions under which the GPU yields to the
// person at the machine: while one holds, the turnstile holds the GPU
// (at the front of the queue, after the work that runs), and gives it back
// once the condition has stayed clear for hold_release_after.
type PresenceSettings struct {
	// HoldWhileProcess are globs (case-insensitive) matched against the
	// running processes' names: the executable's base name, the process
	// name and the command's first argument, with or without .exe.
	// Caddyfile: `hold_while process NAME...`, repeatable.
	HoldWhileProcess []string `json:"hold_while_process,omitempty"`

	// HoldWhileGPUProcess holds the GPU while any process but the
	// engines' own (and those HoldWhileGPUExcept names) uses it, compute
	// or graphics, as nvidia-smi reports. Without nvidia-smi it is off,
	// and the log and the status say so. Caddyfile: `hold_while
	// gpu_process [except NAME...]`.
	HoldWhileGPUProcess bool     `json:"hold_while_gpu_process,omitempty"`
	HoldWhileGPUExcept  []string `json:"hold_while_gpu_except,omitempty"`

	// How long a condition must stay clear before its hold ends.
	// Default 30s.
	HoldReleaseAfter caddy.Duration `json:"hold_release_after,omitempty"`

	// How often the conditions are sampled. Default 2s.
	PresencePollInterval caddy.Duration `json:"presence_poll_interval,omitempty"`
}

const (
	defaultHoldReleaseAfter = 30 * time.Second
	defaultPresencePoll     = 2 * time.Second
	gpuProcessCondition     = "hold_while gpu_process"
)

// validatePresence checks the conditions and builds those that need
// nothing of the host; gpu_process is built when the config loads
// (locatePresence).
func validatePresence(s Settings, c *config) error {
	for _, d := range []struct {
		name string
		val  caddy.Duration
		def  time.Duration
		dst  *time.Duration
	}{
		{"hold_release_after", s.HoldReleaseAfter, defaultHoldReleaseAfter, &c.gpu.HoldReleaseAfter},
		{"presence_poll_interval", s.PresencePollInterval, defaultPresencePoll, &c.gpu.PresencePoll},
	} {
		switch {
		case d.val < 0:
			return fmt.Errorf("%s: %v is negative", d.name, time.Duration(d.val))
		case d.val == 0:
			*d.dst = d.def
		default:
			*d.dst = time.Duration(d.val)
		}
	}
	if len(s.HoldWhileProcess) > 0 {
		p, err := presence.Processes(s.HoldWhileProcess)
		if err != nil {
			return fmt.Errorf("hold_while_process: %v", err)
		}
		c.gpu.Presence = append(c.gpu.Presence, p)
	}
	if len(s.HoldWhileGPUExcept) > 0 && !s.HoldWhileGPUProcess {
		return fmt.Errorf("hold_while_gpu_except: needs hold_while_gpu_process")
	}
	return nil
}

// locatePresence builds hold_while gpu_process on this host: it needs
// nvidia-smi, and without it the condition is off (and said so), the rest
// unchanged.
func (c *config) locatePresence() {
	if !c.HoldWhileGPUProcess {
		return
	}
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		c.gpu.PresenceOff = map[string]string{gpuProcessCondition: "off: nvidia-smi not found in PATH, so GPU processes cannot be seen"}
		return
	}
	ports := c.enginePorts()
	own := func(ctx context.Context) (map[int32]bool, error) { return presence.EnginePIDs(ctx, ports) }
	s, err := presence.GPUProcesses(path, c.GPUIndex, c.HoldWhileGPUExcept, own)
	if err != nil {
		c.gpu.PresenceOff = map[string]string{gpuProcessCondition: "off: " + err.Error()}
		return
	}
	c.gpu.Presence = append(c.gpu.Presence, bounded{s, c.gpu.ProbeTimeout})
}

// bounded bounds each sample by probe_timeout: nvidia-smi is killed at
// the deadline, so a hung driver cannot stall the watch.
type bounded struct {
	presence.Sampler
	timeout time.Duration
}

func (b bounded) Sample(ctx context.Context) (string, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	return b.Sampler.Sample(ctx)
}

// enginePorts are the TCP ports of the engines' URLs: the engines'
// processes (and their children) are found by who listens there.
func (c *config) enginePorts() []int {
	var ports []int
	add := func(raw string) {
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		p := u.Port()
		if p == "" {
			p = map[bool]string{true: "443", false: "80"}[u.Scheme == "https"]
		}
		if n, err := strconv.Atoi(p); err == nil {
			ports = append(ports, n)
		}
	}
	for _, e := range c.gpu.LLMs {
		add(e.URL())
	}
	for _, e := range c.gpu.Images {
		add(e.URL())
	}
	return ports
}

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

// presenceSummary describes the hold_while conditions for the start-up
// log.
func presenceSummary(c *config) []string {
	out := make([]string, 0, len(c.gpu.Presence))
	for _, p := range c.gpu.Presence {
		out = append(out, p.String())
	}
	return out
}
