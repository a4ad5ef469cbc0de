//go:build !windows

package presence

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// streamOnly runs gpu_busy's source over f without a watcher, and returns
// the sampler.
func streamOnly(t *testing.T, f *fakePmon) *busySampler {
	t.Helper()
	f.interval = 2 * time.Second
	src := &pmonSource{smi: "nvidia-smi", index: 0, interval: f.interval, start: f.start}
	s, err := newBusySampler(defaultBusy, src.interval, src.run, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

func script(out string, exit error) func(context.Context, io.Writer) error {
	return func(_ context.Context, w io.Writer) error {
		io.WriteString(w, out)
		return exit
	}
}

// A card whose pmon says it is not supported: the condition is off and
// says why; nvidia-smi is tried again later, with backoff.
func TestGPUBusyOffWhenPmonUnsupported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakePmon{}
		unsupported := script("Not supported on the device(s)\nFailed to process command line\n", errors.New("exit status 6"))
		f.scripts = append(f.scripts, unsupported, unsupported)
		s := streamOnly(t, f)
		synctest.Wait()
		_, present, err := sampleNow(t, s)
		if present || !IsOff(err) || !strings.Contains(err.Error(), "Not supported on the device(s)") {
			t.Fatalf("Sample() = %v, %v; want off, with nvidia-smi's words", present, err)
		}
		// Backoff: again after 1s, then after 2s more.
		time.Sleep(time.Second)
		synctest.Wait()
		if n := f.runs(); n != 2 {
			t.Fatalf("%d runs after 1s, want 2", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := f.runs(); n != 2 {
			t.Fatalf("%d runs after 2s, want still 2 (backoff doubles)", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := f.runs(); n != 3 {
			t.Fatalf("%d runs after 3s, want 3", n)
		}
		// The third run streams: samples come, the condition is on again.
		time.Sleep(f.interval)
		synctest.Wait()
		if _, _, err := sampleNow(t, s); err != nil {
			t.Fatalf("Sample() once pmon streams: %v", err)
		}
	})
}

// A card that prints pmon's headers and never a row reports nothing: off.
func TestGPUBusyOffWhenOnlyHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakePmon{}
		f.scripts = append(f.scripts, func(ctx context.Context, w io.Writer) error {
			io.WriteString(w, pmonHeaderLines)
			<-ctx.Done() // killed at the stall
			return errors.New("signal: killed")
		})
		s := streamOnly(t, f)
		stall := 3*f.interval + stallSlack
		time.Sleep(stall - time.Millisecond)
		synctest.Wait()
		if _, _, err := sampleNow(t, s); err != nil {
			t.Fatalf("Sample() before the stall: %v", err)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if _, present, err := sampleNow(t, s); present || !IsOff(err) || !strings.Contains(err.Error(), "headers but no sample") {
			t.Fatalf("Sample() = %v, %v; want off: headers only", present, err)
		}
	})
}

// Output that is not pmon's (a line too short for its header), or an end
// of the stream, restarts nvidia-smi; meanwhile the sample is an error
// that is not off (the state is held).
func TestGPUBusyRestartsOnGarbageAndExit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakePmon{}
		f.scripts = append(f.scripts,
			script(pmonHeaderLines+pmonIdleRow+"\n    0  4242\n", nil),
			script(pmonHeaderLines+pmonIdleRow+"\n", errors.New("exit status 15: Unable to determine the device handle for GPU0000:01:00.0: Unknown Error")))
		s := streamOnly(t, f)
		synctest.Wait()
		_, _, err := sampleNow(t, s)
		if err == nil || IsOff(err) || !strings.Contains(err.Error(), "unexpected line") {
			t.Fatalf("Sample() after garbage = %v, want an error naming the line", err)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		_, _, err = sampleNow(t, s)
		if f.runs() != 2 || err == nil || IsOff(err) || !strings.Contains(err.Error(), "Unknown Error") {
			t.Fatalf("after %d runs Sample() = %v, want the exit's message", f.runs(), err)
		}
	})
}
