//go:build !windows

package presence

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// gameNotHere is a pid no process of the test machine is likely to have.
const gameNotHere = 3999999

// smiOnPath puts the simulated card's nvidia-smi first on PATH.
func smiOnPath(t *testing.T) *gputest.GPU {
	t.Helper()
	g := gputest.New()
	t.Setenv("PATH", filepath.Dir(g.FakeSMI(t.TempDir()))+string(os.PathListSeparator)+os.Getenv("PATH"))
	return g
}

// Through a real nvidia-smi process (the simulated card's, streaming
// pmon -d 1): the engine's own process at 95% (this test's, listening on
// the engine's port) never holds; a game at 60% does, and is let go once
// it ends.
func TestGPUBusyThroughNvidiaSMI(t *testing.T) {
	g := smiOnPath(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	defer g.Busy("ollama", os.Getpid(), "C", 95)()
	s, err := LocateGPUBusy(0, 50*time.Millisecond, BusyOptions{Percent: 20, For: time.Second}, []string{"http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	engaged, released := make(chan string, 1), make(chan struct{}, 1)
	w := NewWatcher(s, 50*time.Millisecond, 200*time.Millisecond, nil, func(o string) { engaged <- o }, func() { released <- struct{}{} })
	sampled := runWatcher(t, w)
	deadline := time.After(20 * time.Second)
	// Samples that saw the engine busy, and judged it its own.
	tr := s.(*busySampler).t
	for seen := 0; seen < 3; {
		select {
		case <-sampled:
			if b := tr.busy(time.Now()); len(b) == 1 && b[0].pid == int32(os.Getpid()) {
				seen++
			}
		case o := <-engaged:
			t.Fatalf("engaged by %s: the engine's own process", o)
		case <-deadline:
			t.Fatal("the stream never showed the engine busy")
		}
	}
	game := g.Busy("Game.exe", gameNotHere, "G", 60)
	select {
	case o := <-engaged:
		if want := "gpu_busy:Game.exe (pid 3999999)"; o != want {
			t.Fatalf("engaged by %q, want %q", o, want)
		}
	case <-deadline:
		t.Fatal("the game never engaged")
	}
	game()
	select {
	case <-released:
	case <-deadline:
		t.Fatal("never released after the game")
	}
}

// A card whose pmon is not supported: the condition is off, in
// nvidia-smi's words.
func TestGPUBusyUnsupportedThroughNvidiaSMI(t *testing.T) {
	g := smiOnPath(t)
	g.SetPmonUnsupported(true)
	s, err := LocateGPUBusy(0, 50*time.Millisecond, BusyOptions{Percent: 20, For: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWatcher(s, 50*time.Millisecond, time.Second, nil, func(string) {}, func() {})
	sampled := runWatcher(t, w)
	deadline := time.After(20 * time.Second)
	for {
		select {
		case <-sampled:
		case <-deadline:
			t.Fatal("the condition never went off")
		}
		if _, _, err := w.Status(); IsOff(err) {
			if !strings.Contains(err.Error(), "Not supported on the device(s)") {
				t.Fatalf("off: %v, want nvidia-smi's words", err)
			}
			return
		}
	}
}
