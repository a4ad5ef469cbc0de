//go:build !windows

package presence

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pmon's header as a current driver prints it.
const pmonHeaderLines = "# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command \n" +
	"# Idx           #    C/G      %      %      %      %      %      %    name \n"

func pmonRow(pid int, typ, sm, name string) string {
	return fmt.Sprintf("    0 %10d %5s %6s      -      -      -      -      -    %s", pid, typ, sm, name)
}

const pmonIdleRow = "    0          -     -      -      -      -      -      -      -    -              "

// fakePmon plays `nvidia-smi pmon -d N` in a synctest bubble: half an
// interval after it starts it prints the header and a sample, then a
// sample every interval, each time the rows the test last set (an idle
// row when none). A run may instead follow a script of the test's.
type fakePmon struct {
	interval time.Duration

	mu      sync.Mutex
	rows    []string
	scripts []func(ctx context.Context, w io.Writer) error // the next runs', first first
	starts  []string                                       // each run's arguments
}

func (f *fakePmon) set(rows ...string) {
	f.mu.Lock()
	f.rows = rows
	f.mu.Unlock()
}

func (f *fakePmon) runs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.starts)
}

func (f *fakePmon) start(ctx context.Context, path string, args ...string) (io.Reader, func() error, error) {
	f.mu.Lock()
	f.starts = append(f.starts, path+" "+strings.Join(args, " "))
	var script func(context.Context, io.Writer) error
	if len(f.scripts) > 0 {
		script, f.scripts = f.scripts[0], f.scripts[1:]
	}
	f.mu.Unlock()
	pr, pw := io.Pipe()
	stop := context.AfterFunc(ctx, func() { pr.CloseWithError(errors.New("killed")) })
	done := make(chan error, 1)
	go func() {
		defer stop()
		var err error
		if script != nil {
			err = script(ctx, pw)
		} else {
			err = f.stream(ctx, pw)
		}
		pw.Close()
		done <- err
	}()
	return pr, func() error { return <-done }, nil
}

func (f *fakePmon) stream(ctx context.Context, w io.Writer) error {
	time.Sleep(f.interval / 2)
	if _, err := io.WriteString(w, pmonHeaderLines); err != nil {
		return errors.New("signal: killed")
	}
	for {
		f.mu.Lock()
		out := strings.Join(f.rows, "\n")
		f.mu.Unlock()
		if out == "" {
			out = pmonIdleRow
		}
		if _, err := io.WriteString(w, out+"\n"); err != nil {
			return errors.New("signal: killed")
		}
		select {
		case <-ctx.Done():
			return errors.New("signal: killed")
		case <-time.After(f.interval):
		}
	}
}

// busyWatch runs gpu_busy over f with the engines owning pid 4242, sampled
// every 2s (pmon -d 2), released after 30s clear, in the bubble.
func busyWatch(t *testing.T, f *fakePmon, o BusyOptions) (*Watcher, *calls) {
	t.Helper()
	f.interval = pmonInterval(poll)
	src := &pmonSource{smi: "nvidia-smi", index: 1, interval: f.interval, start: f.start}
	own, _ := ownOf(4242)
	s, err := newBusySampler(o, src.interval, src.run, own)
	if err != nil {
		t.Fatal(err)
	}
	s.names = func(context.Context, int32) []string { return nil } // no such processes here
	c := &calls{}
	w := NewWatcher(s, poll, releaseAfter, nil, func(owner string) { c.add("engage " + owner) }, func() { c.add("release") })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, c
}

var defaultBusy = BusyOptions{Percent: 20, For: 10 * time.Second}

// A game at 60% engages once its samples have been over 20% for 10s
// (pmon -d 2: five samples), and releases 30s after it stops.
func TestGPUBusyGameEngagesAfterDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakePmon{}
		f.set(pmonRow(9001, "G", "60", "Game.exe"))
		w, c := busyWatch(t, f, defaultBusy)
		// Samples at 1, 3, 5, 7, 9s; the watcher looks at 0, 2, 4... s.
		time.Sleep(9500 * time.Millisecond)
		synctest.Wait()
		wantCalls(t, c)
		time.Sleep(time.Second)
		synctest.Wait()
		wantCalls(t, c, "engage gpu_busy:Game.exe (pid 9001)")
		if f.starts[0] != "nvidia-smi pmon -i 1 -s u -d 2" {
			t.Fatalf("started %q", f.starts[0])
		}
		if owner, engaged, err := w.Status(); !engaged || err != nil || owner != "gpu_busy:Game.exe (pid 9001)" {
			t.Fatalf("Status() = %q, %v, %v", owner, engaged, err)
		}
		f.set()
		time.Sleep(releaseAfter)
		synctest.Wait()
		wantCalls(t, c, "engage gpu_busy:Game.exe (pid 9001)")
		time.Sleep(2 * poll)
		synctest.Wait()
		wantCalls(t, c, "engage gpu_busy:Game.exe (pid 9001)", "release")
	})
}

// A browser at 3%, the engine's own process at 95% and the desktop's
// compositor never engage; a `-` sample breaks a game's run.
func TestGPUBusyNeverForBrowserEngineOrDesktop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakePmon{}
		f.set(pmonRow(31337, "C+G", "3", "firefox"), pmonRow(4242, "C", "95", "ollama"), pmonRow(1742, "G", "80", "Xorg"))
		_, c := busyWatch(t, f, defaultBusy)
		time.Sleep(time.Minute)
		synctest.Wait()
		wantCalls(t, c)

		// The game: three samples at 60%, one `-`, four more at 60%.
		game := pmonRow(9001, "G", "60", "Game.exe")
		f.set(game)
		time.Sleep(3 * poll)
		f.set(pmonRow(9001, "G", "-", "Game.exe"))
		time.Sleep(poll)
		f.set(game)
		time.Sleep(4 * poll)
		synctest.Wait()
		wantCalls(t, c)
		time.Sleep(poll)
		synctest.Wait()
		wantCalls(t, c, "engage gpu_busy:Game.exe (pid 9001)")
	})
}

// except adds names to the desktop's; include_desktop counts the
// desktop's processes.
func TestGPUBusyExceptAndIncludeDesktop(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    BusyOptions
		want []string
	}{
		{"except", BusyOptions{Percent: 20, For: 2 * time.Second, Except: []string{"blender*"}}, nil},
		{"include_desktop", BusyOptions{Percent: 20, For: 2 * time.Second, IncludeDesktop: true}, []string{"engage gpu_busy:Xorg (pid 1742)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakePmon{}
				f.set(pmonRow(1742, "G", "80", "Xorg"), pmonRow(5555, "C", "50", "blender"))
				_, c := busyWatch(t, f, tc.o)
				time.Sleep(5 * poll)
				synctest.Wait()
				if tc.want == nil {
					wantCalls(t, c)
				} else {
					wantCalls(t, c, tc.want...)
				}
			})
		})
	}
}
