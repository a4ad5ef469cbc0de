package gputest

import (
	"strings"
	"testing"
	"time"
)

// pmon prints its two header lines, then one row per process: memory
// holders as compute processes with "-", Busy ones with their use, an
// idle row of "-" when none.
func TestFakeSMIPmon(t *testing.T) {
	g := New()
	g.SetMemory(16 * gib)
	path := g.FakeSMI(t.TempDir())
	header := "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n" +
		"# Idx           #    C/G      %      %      %      %      %      %    name \n"
	out, _, code := smi(t, path, "pmon", "-i", "0", "-s", "u", "-c", "1")
	if want := header + "    0          -     -      -      -      -      -      -      -    -              \n"; code != 0 || out != want {
		t.Fatalf("idle pmon (status %d):\n%s\nwant:\n%s", code, out, want)
	}
	release := g.Foreign("/usr/bin/python3", 4242, gib)
	defer release()
	game := g.Busy(`Z:\games\Game\Game.exe`, 9001, "G", 60)
	out, _, _ = smi(t, path, "pmon", "-c", "1")
	want := header +
		"    0       4242     C      -      -      -      -      -      -    python3        \n" +
		"    0       9001     G     60      -      -      -      -      -    Game.exe       \n"
	if out != want {
		t.Fatalf("pmon:\n%s\nwant:\n%s", out, want)
	}
	game()
	if out, _, _ = smi(t, path, "pmon", "-c", "1"); strings.Contains(out, "Game.exe") {
		t.Fatalf("pmon after the game's end:\n%s", out)
	}

	for _, args := range [][]string{{"pmon", "-d", "0"}, {"pmon", "-d", "11"}, {"pmon", "-s", "m"}, {"pmon", "-x"}} {
		if _, _, code := smi(t, path, args...); code != 9 {
			t.Errorf("%q: status %d, want 9", args, code)
		}
	}
	if _, errs, code := smi(t, path, "pmon", "-i", "3"); code != 9 || !strings.Contains(errs, "No devices") {
		t.Errorf("pmon -i 3: status %d %q", code, errs)
	}
	g.SetPmonUnsupported(true)
	if out, _, code := smi(t, path, "pmon", "-c", "1"); code != 6 || !strings.HasPrefix(out, "Not supported on the device(s)\n") {
		t.Errorf("unsupported pmon: status %d:\n%s", code, out)
	}
	g.SetPmonUnsupported(false)
	g.SetSMIFailing(true)
	if _, errs, code := smi(t, path, "pmon", "-c", "1"); code != 9 || !strings.Contains(errs, "NVIDIA-SMI has failed") {
		t.Errorf("pmon with the driver gone: status %d %q", code, errs)
	}
}

// With -d it streams a sample every SECONDS, each from the card as it is
// then.
func TestFakeSMIPmonStreams(t *testing.T) {
	g := New()
	path := g.FakeSMI(t.TempDir())
	lines, _ := loop(t, path, "pmon", "-i", "0", "-s", "u", "-d", "1")
	for _, want := range []string{"# gpu", "# Idx", "    0          -"} {
		if l := next(t, lines, 5*time.Second); !strings.HasPrefix(l, want) {
			t.Fatalf("line %q, want it to begin %q", l, want)
		}
	}
	release := g.Busy("Game.exe", 9001, "G", 60)
	defer release()
	deadline := time.After(5 * time.Second)
	for l := ""; !strings.Contains(l, "Game.exe"); {
		select {
		case l = <-lines:
		case <-deadline:
			t.Fatalf("the stream never showed the game; last %q", l)
		}
	}
}
