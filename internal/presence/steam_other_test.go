//go:build !windows

package presence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
)

// writeRegistry writes registry.vdf under dir with RunningAppID id.
func writeRegistry(t *testing.T, dir, id string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(registryVDF, `"RUNNING"`, `"`+id+`"`)
	if err := os.WriteFile(filepath.Join(dir, "registry.vdf"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A game that Steam runs holds the GPU (owner steam:APPID) while Steam's
// client runs, from the first sample that sees it; it is let go
// hold_release_after after RunningAppID goes back to 0. A RunningAppID
// left behind by a Steam that is gone holds nothing.
func TestSteamRunningAppHolds(t *testing.T) {
	home := t.TempDir()
	dotSteam := filepath.Join(home, ".steam")
	writeRegistry(t, dotSteam, "0")
	steam := startHelper(t, copyExe(t, "steam"), "", "wait")
	s, err := Steam(home)
	if err != nil {
		t.Fatal(err)
	}
	if s.String() != "steam home "+home {
		t.Fatalf("String() = %q", s.String())
	}
	synctest.Test(t, func(t *testing.T) {
		c := &calls{}
		w := NewWatcher(s, poll, releaseAfter, nil, func(owner string) { c.add("engage " + owner) }, func() { c.add("release") })
		runWatcher(t, w)
		step(3)
		wantCalls(t, c)

		writeRegistry(t, dotSteam, "570")
		step(1)
		wantCalls(t, c, "engage steam:570")

		writeRegistry(t, dotSteam, "0")
		step(int(releaseAfter / poll))
		wantCalls(t, c, "engage steam:570")
		step(1)
		wantCalls(t, c, "engage steam:570", "release")

		steam.stop()
		writeRegistry(t, dotSteam, "570")
		step(3)
		wantCalls(t, c, "engage steam:570", "release")
		if _, _, err := w.Status(); err != nil {
			t.Fatalf("Status() error %v", err)
		}
	})
}

// Flatpak's Steam keeps registry.vdf under ~/.var/app; no registry.vdf at
// all turns the condition off, naming where it looked.
func TestSteamRegistryLocations(t *testing.T) {
	home := t.TempDir()
	s, _ := Steam(home)
	_, present, err := sampleNow(t, s)
	if present || !IsOff(err) || !strings.Contains(err.Error(), filepath.Join(home, ".steam", "registry.vdf")) {
		t.Fatalf("Sample() without Steam = %v, %v; want off, naming the path", present, err)
	}
	startHelper(t, copyExe(t, "steam"), "", "wait")
	writeRegistry(t, filepath.Join(home, ".var", "app", "com.valvesoftware.Steam", ".steam"), "1091500")
	if owner, present, err := sampleNow(t, s); owner != "steam:1091500" || !present || err != nil {
		t.Fatalf("Sample() with Flatpak's Steam = %q, %v, %v", owner, present, err)
	}
	// A half-written file is an error, not a clear sample.
	if err := os.WriteFile(filepath.Join(home, ".var", "app", "com.valvesoftware.Steam", ".steam", "registry.vdf"), []byte(`"Registry" {`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sampleNow(t, s); err == nil || IsOff(err) {
		t.Fatalf("Sample() of a broken registry.vdf = %v, want an error", err)
	}
}

// With no home given, the user's own is read.
func TestSteamDefaultHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	writeRegistry(t, filepath.Join(home, ".steam"), "0")
	s, _ := Steam("")
	if _, present, err := sampleNow(t, s); present || err != nil {
		t.Fatalf("Sample() = %v, %v", present, err)
	}
}
