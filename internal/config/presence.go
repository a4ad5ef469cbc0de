package config

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/presence"
)

const (
	defaultHoldReleaseAfter = 30 * time.Second
	defaultPresencePoll     = 2 * time.Second
	gpuProcessCondition     = "hold_while gpu_process"
)

// validatePresence checks the conditions and builds those that need
// nothing of the host; gpu_process is built when the config loads
// (locatePresence).
func validatePresence(s Settings, c *Turnstile) error {
	for _, d := range []struct {
		name string
		val  caddy.Duration
		def  time.Duration
		dst  *time.Duration
	}{
		{"hold_release_after", s.HoldReleaseAfter, defaultHoldReleaseAfter, &c.GPU.HoldReleaseAfter},
		{"presence_poll_interval", s.PresencePollInterval, defaultPresencePoll, &c.GPU.PresencePoll},
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
		c.GPU.Presence = append(c.GPU.Presence, p)
	}
	if len(s.HoldWhileGPUExcept) > 0 && !s.HoldWhileGPUProcess {
		return fmt.Errorf("hold_while_gpu_except: needs hold_while_gpu_process")
	}
	return nil
}

// locatePresence builds hold_while gpu_process on this host: it needs
// nvidia-smi, and without it the condition is off (and said so), the rest
// unchanged.
func (c *Turnstile) locatePresence() {
	if !c.HoldWhileGPUProcess {
		return
	}
	s, err := presence.LocateGPUProcesses(c.GPUIndex, c.HoldWhileGPUExcept, false, c.engineURLs(), c.GPU.ProbeTimeout)
	if err != nil {
		c.GPU.PresenceOff = map[string]string{gpuProcessCondition: "off: " + err.Error()}
		return
	}
	c.GPU.Presence = append(c.GPU.Presence, s)
}

// PresenceSummary describes the hold_while conditions for the start-up
// log.
func (c *Turnstile) PresenceSummary() []string {
	out := make([]string, 0, len(c.GPU.Presence))
	for _, p := range c.GPU.Presence {
		out = append(out, p.String())
	}
	return out
}
