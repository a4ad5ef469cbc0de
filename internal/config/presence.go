package config

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
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
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		c.GPU.PresenceOff = map[string]string{gpuProcessCondition: "off: nvidia-smi not found in PATH, so GPU processes cannot be seen"}
		return
	}
	ports := c.enginePorts()
	own := func(ctx context.Context) (map[int32]bool, error) { return presence.EnginePIDs(ctx, ports) }
	s, err := presence.GPUProcesses(path, c.GPUIndex, c.HoldWhileGPUExcept, own)
	if err != nil {
		c.GPU.PresenceOff = map[string]string{gpuProcessCondition: "off: " + err.Error()}
		return
	}
	c.GPU.Presence = append(c.GPU.Presence, bounded{s, c.GPU.ProbeTimeout})
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
func (c *Turnstile) enginePorts() []int {
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
	for _, e := range c.GPU.LLMs {
		add(e.URL())
	}
	for _, e := range c.GPU.Images {
		add(e.URL())
	}
	return ports
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
