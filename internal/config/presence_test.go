package config

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// presenceBlock is a global block with an engine on line 2; lines follow
// from line 3.
func presenceBlock(lines ...string) string {
	return "gpu_turnstile {\n\tollama http://127.0.0.1:1\n\t" + strings.Join(lines, "\n\t") + "\n}"
}

// Each hold_while condition is parsed into its fields, and the ones that
// need nothing of the host are built with their defaults.
func TestPresenceOptionsParse(t *testing.T) {
	_, s, err := parse(t, presenceBlock("hold_while gpu_process include_desktop except Xorg",
		"hold_while gpu_busy 35 for 20s except blender* obs",
		"hold_while steam home /home/player", "presence_gpu_index 1"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.HoldWhileGPUProcess || !s.HoldWhileGPUIncludeDesktop || !slices.Equal(s.HoldWhileGPUExcept, []string{"Xorg"}) ||
		!s.HoldWhileGPUBusy || s.HoldWhileGPUBusyPercent != 35 || time.Duration(s.HoldWhileGPUBusyFor) != 20*time.Second ||
		!slices.Equal(s.HoldWhileGPUBusyExcept, []string{"blender*", "obs"}) || s.HoldWhileGPUBusyIncludeDesktop ||
		!s.HoldWhileSteam || s.HoldWhileSteamHome != "/home/player" || s.PresenceGPUIndex == nil || *s.PresenceGPUIndex != 1 {
		t.Fatalf("settings %+v", s.PresenceSettings)
	}
	c, err := Validate(*s)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.PresenceSummary(); !slices.Equal(got, []string{"steam home /home/player"}) {
		t.Fatalf("conditions built before Locate: %q", got)
	}

	_, s, err = parse(t, presenceBlock("hold_while gpu_busy", "hold_while steam"))
	if err != nil {
		t.Fatal(err)
	}
	if o, err := busyOptions(*s, 2*time.Second); err != nil || o.Percent != 20 || o.For != 10*time.Second || o.IncludeDesktop {
		t.Fatalf("gpu_busy's defaults: %+v, %v", o, err)
	}
	if o, _ := busyOptions(*s, 15*time.Second); o.For != 15*time.Second {
		t.Fatalf("gpu_busy's default duration under a 15s poll: %v, want 15s", o.For)
	}
}

// Every invalid hold_while is refused at its line, naming it; a check
// across options at the first hold_while.
func TestPresenceOptionsErrors(t *testing.T) {
	for _, tc := range []struct {
		src, want string
		line      int
	}{
		{presenceBlock("hold_while gpu_busy 0"), `hold_while gpu_busy: PERCENT "0" is not a whole number from 1 to 100`, 3},
		{presenceBlock("hold_while gpu_busy 101 for 20s"), `PERCENT "101" is not a whole number from 1 to 100`, 3},
		{presenceBlock("hold_while gpu_busy 2.5"), `PERCENT "2.5" is not a whole number`, 3},
		{presenceBlock("hold_while gpu_busy for soon"), `hold_while gpu_busy for: invalid duration "soon"`, 3},
		{presenceBlock("hold_while gpu_busy for"), "hold_while gpu_busy: want `gpu_busy [PERCENT] [for DURATION]", 3},
		{presenceBlock("hold_while gpu_busy 20 fast"), `got "20 fast" at "fast"`, 3},
		{presenceBlock("hold_while gpu_busy for 5s for 6s"), `at "for"`, 3},
		{presenceBlock("hold_while gpu_busy except"), `at "except"`, 3},
		{presenceBlock("hold_while gpu_busy except a/b"), "hold_while gpu_busy: except: process name glob \"a/b\"", 3},
		{presenceBlock("hold_while gpu_process 20"), "want `gpu_process [except NAME...]`", 3},
		{presenceBlock("hold_while gpu_process include_desktop include_desktop"), `at "include_desktop"`, 3},
		{presenceBlock("hold_while gpu_busy", "hold_while gpu_busy 30"), "hold_while gpu_busy: given twice", 4},
		{presenceBlock("hold_while steam", "hold_while steam"), "hold_while steam: given twice", 4},
		{presenceBlock("hold_while steam home"), "hold_while steam: want `steam [home PATH]`", 3},
		{presenceBlock("hold_while steam now"), `got "now"`, 3},
		{presenceBlock("presence_gpu_index -1"), `presence_gpu_index: "-1" is not a GPU index`, 3},
		{presenceBlock("presence_gpu_index 0", "presence_gpu_index 1"), "presence_gpu_index: given twice, on lines 3 and 4", 4},
		// Across options: at the hold_while line of the condition.
		{presenceBlock("hold_while gpu_busy for 1s", "presence_poll_interval 5s"), "hold_while_gpu_busy_for: 1s is less than presence_poll_interval (5s)", 3},
		{presenceBlock("hold_while process game*", "hold_while gpu_busy for 1s", "presence_poll_interval 5s"), "hold_while_gpu_busy_for: 1s is less than presence_poll_interval (5s)", 4},
		{presenceBlock("hold_while steam home player"), `hold_while_steam_home: "player" is not an absolute path`, 3},
	} {
		_, _, err := parse(t, tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasSuffix(err.Error(), ":"+strconv.Itoa(tc.line)) {
			t.Errorf("%q: %v, want %q at line %d", tc.src, err, tc.want, tc.line)
		}
	}
}

// A JSON config gets the Caddyfile's checks, naming its fields.
func TestPresenceOptionsJSON(t *testing.T) {
	var s Settings
	err := json.Unmarshal([]byte(`{"ollama": "http://127.0.0.1:1", "hold_while_gpu_busy": true,
		"hold_while_gpu_busy_percent": 60, "hold_while_gpu_busy_for": "30s", "hold_while_gpu_busy_include_desktop": true,
		"hold_while_steam": true, "presence_gpu_index": 0, "gpu_index": 2}`), &s)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Validate(s)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := busyOptions(c.Settings, c.GPU.PresencePoll); o.Percent != 60 || o.For != 30*time.Second || !o.IncludeDesktop || c.presenceIndex() != 0 {
		t.Fatalf("gpu_busy %+v on GPU %d", o, c.presenceIndex())
	}

	base := Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}}
	with := func(f func(*Settings)) Settings { s := base; f(&s); return s }
	minusOne := -1
	for _, tc := range []struct {
		s    Settings
		want string
	}{
		{with(func(s *Settings) { s.HoldWhileGPUBusy, s.HoldWhileGPUBusyPercent = true, 101 }), "hold_while_gpu_busy_percent: 101 is not from 1 to 100"},
		{with(func(s *Settings) { s.HoldWhileGPUBusy, s.HoldWhileGPUBusyPercent = true, -5 }), "hold_while_gpu_busy_percent: -5 is not from 1 to 100"},
		{with(func(s *Settings) { s.HoldWhileGPUBusy, s.HoldWhileGPUBusyFor = true, -1 }), "hold_while_gpu_busy_for: -1ns is negative"},
		{with(func(s *Settings) { s.HoldWhileGPUBusy, s.HoldWhileGPUBusyFor = true, 1e9 }), "hold_while_gpu_busy_for: 1s is less than presence_poll_interval (2s)"},
		{with(func(s *Settings) { s.HoldWhileGPUBusy, s.HoldWhileGPUBusyExcept = true, []string{"["} }), `hold_while_gpu_busy_except: process name glob "[": syntax error in pattern`},
		{with(func(s *Settings) { s.HoldWhileGPUBusyPercent = 30 }), "hold_while_gpu_busy_percent: needs hold_while_gpu_busy"},
		{with(func(s *Settings) { s.HoldWhileGPUBusyIncludeDesktop = true }), "hold_while_gpu_busy_include_desktop: needs hold_while_gpu_busy"},
		{with(func(s *Settings) { s.HoldWhileGPUIncludeDesktop = true }), "hold_while_gpu_include_desktop: needs hold_while_gpu_process"},
		{with(func(s *Settings) { s.HoldWhileGPUProcess, s.HoldWhileGPUExcept = true, []string{""} }), "hold_while_gpu_except: empty process name glob"},
		{with(func(s *Settings) { s.HoldWhileSteamHome = "/home/player" }), "hold_while_steam_home: needs hold_while_steam"},
		{with(func(s *Settings) { s.HoldWhileSteam, s.HoldWhileSteamHome = true, "~/player" }), `hold_while_steam_home: "~/player" is not an absolute path`},
		{with(func(s *Settings) { s.PresenceGPUIndex = &minusOne }), "presence_gpu_index: -1 is negative"},
	} {
		if _, err := Validate(tc.s); err == nil || err.Error() != tc.want {
			t.Errorf("%+v: %v, want %q", tc.s.PresenceSettings, err, tc.want)
		}
	}
}

// Without nvidia-smi, gpu_process (and gpu_busy, but on Windows) are off
// and say why; with it, they watch the GPU presence_gpu_index names, not
// vram_probe's.
func TestLocatePresence(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the nvidia-smi stand-in is a shell script, and gpu_busy reads PDH on Windows")
	}
	s := Settings{Shorthands: map[string]string{"ollama": "http://127.0.0.1:1"}, GPUIndex: 1, PresenceSettings: PresenceSettings{
		HoldWhileGPUProcess: true, HoldWhileGPUBusy: true, PresenceGPUIndex: new(int)}}
	*s.PresenceGPUIndex = 3
	t.Setenv("PATH", t.TempDir())
	c, err := Validate(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Locate(); err != nil {
		t.Fatal(err)
	}
	if len(c.GPU.Presence) != 0 || !strings.Contains(c.GPU.PresenceOff[gpuProcessCondition], "off: nvidia-smi not found") ||
		!strings.Contains(c.GPU.PresenceOff[gpuBusyCondition], "off: nvidia-smi not found") {
		t.Fatalf("presence %q, off %q", c.PresenceSummary(), c.GPU.PresenceOff)
	}

	dir := t.TempDir()
	script := "#!/bin/sh\necho \"$*\" >> " + filepath.Join(dir, "args") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	c, _ = Validate(s)
	if err := c.Locate(); err != nil {
		t.Fatal(err)
	}
	if got := c.PresenceSummary(); len(c.GPU.PresenceOff) != 0 || !slices.Equal(got, []string{"gpu_process", "gpu_busy 20 for 10s"}) {
		t.Fatalf("presence %q, off %q", got, c.GPU.PresenceOff)
	}
	c.GPU.Presence[0].Sample(context.Background())
	if b, _ := os.ReadFile(filepath.Join(dir, "args")); !strings.Contains(string(b), "-i 3") {
		t.Fatalf("gpu_process ran nvidia-smi %q, want GPU 3", b)
	}
}
