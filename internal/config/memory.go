package config

import (
	"context"
	"fmt"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/presence"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/vram"
)

// MaxVRAMSize is the largest size vram_reserve and model_vram take.
const MaxVRAMSize = 1 << 62

const (
	defaultVRAMPoll = time.Second
	// memoryReadTimeout bounds the reading of the card's total when the
	// config loads (vram_reserve's check).
	memoryReadTimeout = 5 * time.Second
)

// validateMemory checks memory-aware admission's options and, with
// vram_admission, makes its config; nvidia-smi is looked for when the
// config loads (locateMemory). Run after validateVRAM.
func validateMemory(s Settings, c *Turnstile) error {
	if err := checkMemoryValues(s); err != nil {
		return err
	}
	models := slices.Sorted(maps.Keys(s.ModelVRAM))
	for _, m := range models {
		switch n := s.ModelVRAM[m]; {
		case m == "":
			return fmt.Errorf("model_vram: empty model name")
		case n <= 0:
			return fmt.Errorf("model_vram: %s: %d is not a size > 0", m, n)
		case n > MaxVRAMSize:
			return fmt.Errorf("model_vram: %s: %d is over the 4EiB maximum", m, n)
		}
	}
	listed := map[string]bool{}
	for _, m := range s.CoResident {
		if m == "" {
			return fmt.Errorf("co_resident: empty model name")
		}
		if listed[m] {
			return fmt.Errorf("co_resident: model %q listed twice", m)
		}
		listed[m] = true
	}
	if len(s.CoResident) > 0 && !s.VRAMAdmission {
		return fmt.Errorf("co_resident: needs vram_admission")
	}
	set := memoryOptionsSet(s)
	if len(set) > 0 && s.VRAMProbe != "nvidia-smi" {
		return fmt.Errorf("%s: needs vram_probe nvidia-smi", set[0])
	}
	if !s.VRAMAdmission {
		if len(set) > 0 {
			c.warnings = append(c.warnings, strings.Join(set, ", ")+" given without vram_admission: no effect")
		}
		return nil
	}
	poll := time.Duration(s.VRAMPollInterval)
	if poll == 0 {
		poll = defaultVRAMPoll
	}
	c.GPU.Memory = &gpu.MemoryConfig{
		Index:      s.GPUIndex,
		Reserve:    s.VRAMReserve,
		Poll:       poll,
		Models:     maps.Clone(s.ModelVRAM),
		CoResident: slices.Clone(s.CoResident),
		// A missing first reading is stale too: the first requests
		// after a start wait for it.
		StaleAdmits: s.VRAMStale == "admit",
	}
	return nil
}

// checkMemoryValues checks the values of the memory options that stand
// alone.
func checkMemoryValues(s Settings) error {
	switch {
	case s.VRAMReserve < 0:
		return fmt.Errorf("vram_reserve: %d is negative", s.VRAMReserve)
	case s.VRAMReserve > MaxVRAMSize:
		return fmt.Errorf("vram_reserve: %d is over the 4EiB maximum", s.VRAMReserve)
	case s.VRAMPollInterval < 0:
		return fmt.Errorf("vram_poll_interval: %v is negative", time.Duration(s.VRAMPollInterval))
	case s.VRAMStale != "" && s.VRAMStale != "wait" && s.VRAMStale != "admit":
		return fmt.Errorf("vram_stale: %q: want wait or admit", s.VRAMStale)
	}
	return nil
}

// memoryOptionsSet are the memory-aware admission options s gives, by
// their Caddyfile names, vram_admission first.
func memoryOptionsSet(s Settings) []string {
	var set []string
	for _, o := range []struct {
		name string
		set  bool
	}{
		{"vram_admission", s.VRAMAdmission},
		{"co_resident", len(s.CoResident) > 0},
		{"model_vram", len(s.ModelVRAM) > 0},
		{"vram_reserve", s.VRAMReserve != 0},
		{"vram_poll_interval", s.VRAMPollInterval != 0},
		{"vram_stale", s.VRAMStale != ""},
	} {
		if o.set {
			set = append(set, o.name)
		}
	}
	return set
}

// locateMemory finds nvidia-smi for vram_admission and checks
// vram_reserve against the card's total. A card that cannot be read now
// does not refuse the config, and says so in Warnings: admission falls
// back to the whole-card rules while readings fail.
func (c *Turnstile) locateMemory() error {
	m := c.GPU.Memory
	if m == nil {
		return nil
	}
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return fmt.Errorf("vram_admission: nvidia-smi not found in PATH: %v", err)
	}
	m.SMIPath = path
	var llms []string
	for _, e := range c.GPU.LLMs {
		llms = append(llms, e.URL())
	}
	m.EnginePIDs = presence.EngineProcesses(llms)
	if m.Reserve == 0 {
		return nil // nothing to check
	}
	ctx, cancel := context.WithTimeout(context.Background(), memoryReadTimeout)
	defer cancel()
	r, err := vram.Read(ctx, path, m.Index)
	if err != nil && ctx.Err() == nil {
		r, err = vram.Read(ctx, path, m.Index) // once more, for a passing fault
	}
	if err != nil {
		c.warnings = append(c.warnings, fmt.Sprintf("vram_reserve not checked against the card's total: %v", err))
		return nil
	}
	if m.Reserve >= r.Total {
		return fmt.Errorf("vram_reserve: %s is at or over the card's total memory (%s)",
			humanize.IBytes(uint64(m.Reserve)), humanize.IBytes(uint64(r.Total)))
	}
	return nil
}

// Warnings are what the settings accept but that has no effect (memory
// options without vram_admission), for the log when the config starts.
func (c *Turnstile) Warnings() []string {
	return c.warnings
}

// modelSizes are model_vram's footprints as MODEL=SIZE, by model name, for
// the log.
func modelSizes(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		out = append(out, name+"="+humanize.IBytes(uint64(m[name])))
	}
	return out
}
