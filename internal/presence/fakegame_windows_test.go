package presence

import (
	"testing"
	"time"
)

// A game run on Windows holds the GPU while it runs: the Watcher of
// `hold_while process fakegame` sees a real Windows process, FakeGame.exe
// (a copy of this test binary under a game's name), in gopsutil's process
// list, engages with the name Windows reports, and releases once the game
// has exited by itself.
func TestWatcherHoldsWhileAWindowsGameRuns(t *testing.T) {
	s, err := Processes([]string{"fakegame"})
	if err != nil {
		t.Fatal(err)
	}
	engaged := make(chan string, 1)
	released := make(chan struct{}, 1)
	w := NewWatcher(s, 50*time.Millisecond, 0, nil,
		func(owner string) { engaged <- owner },
		func() { released <- struct{}{} })
	sampled := runWatcher(t, w)

	within(t, sampled, "the first sample")
	if _, on, err := w.Status(); on || err != nil {
		t.Fatalf("before the game: engaged %v, error %v", on, err)
	}
	game := startHelper(t, copyExe(t, "FakeGame"), "", "wait")
	if owner := within(t, engaged, "engage while FakeGame.exe runs"); owner != "process:FakeGame.exe" {
		t.Fatalf("engaged by %q, want process:FakeGame.exe", owner)
	}
	// The game quits: its standard input closing is its signal to exit.
	game.stdin.Close()
	if err := game.cmd.Wait(); err != nil {
		t.Fatalf("FakeGame.exe: %v", err)
	}
	within(t, released, "release once FakeGame.exe has exited")
	if owner, on, _ := w.Status(); on {
		t.Fatalf("after the game: still engaged by %q", owner)
	}
}

// within waits for a value on ch for up to 30 s: a bound for a loaded
// machine, not a delay the test relies on.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s within 30s", what)
		panic("unreachable")
	}
}
