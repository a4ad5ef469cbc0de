package config

import (
	"fmt"
	"path"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/presence"
)

const (
	defaultHoldReleaseAfter = 30 * time.Second
	defaultPresencePoll     = 2 * time.Second
	defaultBusyPercent      = 20
	defaultBusyFor          = 10 * time.Second
	gpuProcessCondition     = "hold_while gpu_process"
	gpuBusyCondition        = "hold_while gpu_busy"
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
	// engines' own, the desktop's (Xorg, gnome-shell, dwm.exe...: see
	// the docs) and those HoldWhileGPUExcept names uses it, compute or
	// graphics, as nvidia-smi reports. Without nvidia-smi it is off, and
	// the log and the status say so. Caddyfile: `hold_while gpu_process
	// [include_desktop] [except NAME...]`.
	HoldWhileGPUProcess bool     `json:"hold_while_gpu_process,omitempty"`
	HoldWhileGPUExcept  []string `json:"hold_while_gpu_except,omitempty"`
	// HoldWhileGPUIncludeDesktop counts the desktop's processes too.
	HoldWhileGPUIncludeDesktop bool `json:"hold_while_gpu_include_desktop,omitempty"`

	// HoldWhileGPUBusy holds the GPU while a process that is none of the
	// engines', none of the desktop's and none of HoldWhileGPUBusyExcept
	// has used at least HoldWhileGPUBusyPercent of the GPU (default 20,
	// 1-100) in every sample for HoldWhileGPUBusyFor (default 10s, at
	// least presence_poll_interval): Linux nvidia-smi pmon's sm, Windows
	// the GPU Engine 3D counters. Caddyfile: `hold_while gpu_busy
	// [PERCENT] [for DURATION] [include_desktop] [except NAME...]`.
	HoldWhileGPUBusy               bool           `json:"hold_while_gpu_busy,omitempty"`
	HoldWhileGPUBusyPercent        int            `json:"hold_while_gpu_busy_percent,omitempty"`
	HoldWhileGPUBusyFor            caddy.Duration `json:"hold_while_gpu_busy_for,omitempty"`
	HoldWhileGPUBusyExcept         []string       `json:"hold_while_gpu_busy_except,omitempty"`
	HoldWhileGPUBusyIncludeDesktop bool           `json:"hold_while_gpu_busy_include_desktop,omitempty"`

	// HoldWhileSteam holds the GPU while Steam reports a running game
	// (RunningAppID not 0) and Steam's client runs. On Linux it reads
	// registry.vdf under HoldWhileSteamHome (an absolute path; default
	// the home of the user Caddy runs as, which for a service is not the
	// player's). Caddyfile: `hold_while steam [home PATH]`.
	HoldWhileSteam     bool   `json:"hold_while_steam,omitempty"`
	HoldWhileSteamHome string `json:"hold_while_steam_home,omitempty"`

	// PresenceGPUIndex is the GPU that gpu_process and gpu_busy watch
	// (nvidia-smi's index). Default: gpu_index, the card vram_probe reads.
	PresenceGPUIndex *int `json:"presence_gpu_index,omitempty"`

	// How long a condition must stay clear before its hold ends.
	// Default 30s.
	HoldReleaseAfter caddy.Duration `json:"hold_release_after,omitempty"`

	// How often the conditions are sampled. Default 2s.
	PresencePollInterval caddy.Duration `json:"presence_poll_interval,omitempty"`
}

// validatePresence checks the conditions and builds those that need
// nothing of the host; gpu_process and gpu_busy are built when the config
// loads (locatePresence).
func validatePresence(s Settings, c *Turnstile) error {
	if err := presenceDurations(s, c); err != nil {
		return err
	}
	if len(s.HoldWhileProcess) > 0 {
		p, err := presence.Processes(s.HoldWhileProcess)
		if err != nil {
			return fmt.Errorf("hold_while_process: %v", err)
		}
		c.GPU.Presence = append(c.GPU.Presence, p)
	}
	if err := validateGPUProcess(s); err != nil {
		return err
	}
	if _, err := busyOptions(s, c.GPU.PresencePoll); err != nil {
		return err
	}
	if err := validateSteam(s, c); err != nil {
		return err
	}
	if i := s.PresenceGPUIndex; i != nil && *i < 0 {
		return fmt.Errorf("presence_gpu_index: %d is negative", *i)
	}
	return nil
}

// presenceDurations fills in hold_release_after and
// presence_poll_interval.
func presenceDurations(s Settings, c *Turnstile) error {
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
	return nil
}

func validateGPUProcess(s Settings) error {
	switch {
	case s.HoldWhileGPUProcess:
		if err := presence.CheckGlobs(s.HoldWhileGPUExcept); err != nil {
			return fmt.Errorf("hold_while_gpu_except: %v", err)
		}
	case len(s.HoldWhileGPUExcept) > 0:
		return fmt.Errorf("hold_while_gpu_except: needs hold_while_gpu_process")
	case s.HoldWhileGPUIncludeDesktop:
		return fmt.Errorf("hold_while_gpu_include_desktop: needs hold_while_gpu_process")
	}
	return nil
}

// busyOptions are gpu_busy's options with their defaults: the duration's
// is at least the poll interval.
func busyOptions(s Settings, poll time.Duration) (presence.BusyOptions, error) {
	o := presence.BusyOptions{Percent: s.HoldWhileGPUBusyPercent, For: time.Duration(s.HoldWhileGPUBusyFor),
		Except: s.HoldWhileGPUBusyExcept, IncludeDesktop: s.HoldWhileGPUBusyIncludeDesktop}
	if !s.HoldWhileGPUBusy {
		for _, f := range []struct {
			name string
			set  bool
		}{{"percent", o.Percent != 0}, {"for", o.For != 0}, {"except", len(o.Except) > 0}, {"include_desktop", o.IncludeDesktop}} {
			if f.set {
				return o, fmt.Errorf("hold_while_gpu_busy_%s: needs hold_while_gpu_busy", f.name)
			}
		}
		return o, nil
	}
	switch {
	case o.Percent == 0:
		o.Percent = defaultBusyPercent
	case o.Percent < 1 || o.Percent > 100:
		return o, fmt.Errorf("hold_while_gpu_busy_percent: %d is not from 1 to 100", o.Percent)
	}
	switch {
	case o.For == 0:
		o.For = max(defaultBusyFor, poll)
	case o.For < 0:
		return o, fmt.Errorf("hold_while_gpu_busy_for: %v is negative", o.For)
	case o.For < poll:
		return o, fmt.Errorf("hold_while_gpu_busy_for: %v is less than presence_poll_interval (%v)", o.For, poll)
	}
	if err := presence.CheckGlobs(o.Except); err != nil {
		return o, fmt.Errorf("hold_while_gpu_busy_except: %v", err)
	}
	return o, nil
}

func validateSteam(s Settings, c *Turnstile) error {
	home := s.HoldWhileSteamHome
	switch {
	case !s.HoldWhileSteam && home != "":
		return fmt.Errorf("hold_while_steam_home: needs hold_while_steam")
	case !s.HoldWhileSteam:
		return nil
	case home != "" && !path.IsAbs(home) && !filepath.IsAbs(home):
		return fmt.Errorf("hold_while_steam_home: %q is not an absolute path", home)
	}
	st, err := presence.Steam(home)
	if err != nil {
		return fmt.Errorf("hold_while_steam: %v", err)
	}
	c.GPU.Presence = append(c.GPU.Presence, st)
	return nil
}

// presenceIndex is the GPU that gpu_process and gpu_busy watch.
func (c *Turnstile) presenceIndex() int {
	if c.PresenceGPUIndex != nil {
		return *c.PresenceGPUIndex
	}
	return c.GPUIndex
}

// locatePresence builds hold_while gpu_process and gpu_busy on this host:
// they need nvidia-smi (gpu_busy on Windows the PDH counters), and
// without it they are off (and said so), the rest unchanged.
func (c *Turnstile) locatePresence() {
	off := map[string]string{}
	urls := c.engineURLs()
	if c.HoldWhileGPUProcess {
		s, err := presence.LocateGPUProcesses(c.presenceIndex(), c.HoldWhileGPUExcept, c.HoldWhileGPUIncludeDesktop, urls, c.GPU.ProbeTimeout)
		if err != nil {
			off[gpuProcessCondition] = "off: " + err.Error()
		} else {
			c.GPU.Presence = append(c.GPU.Presence, s)
		}
	}
	if c.HoldWhileGPUBusy {
		o, _ := busyOptions(c.Settings, c.GPU.PresencePoll) // checked by Validate
		s, err := presence.LocateGPUBusy(c.presenceIndex(), c.GPU.PresencePoll, o, urls)
		if err != nil {
			off[gpuBusyCondition] = "off: " + err.Error()
		} else {
			c.GPU.Presence = append(c.GPU.Presence, s)
		}
	}
	if len(off) > 0 {
		c.GPU.PresenceOff = off
	}
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
