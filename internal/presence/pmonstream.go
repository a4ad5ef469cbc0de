//go:build !windows

package presence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/restart"
)

const (
	// A stream that stops is started again after a pause that doubles
	// from streamBackoffMin up to streamBackoffMax, and goes back to the
	// minimum once a run has given samples for a while.
	streamBackoffMin = time.Second
	streamBackoffMax = time.Minute
	// stallSlack is added to three intervals to say how long a stream may
	// go without a sample: nvidia-smi's start can take seconds while the
	// driver initialises.
	stallSlack = 5 * time.Second
)

// startFunc starts path with args and returns its standard output, read
// until the process ends, and wait, which returns how it ended (its
// standard error's first line in the error). ctx's end kills it.
type startFunc func(ctx context.Context, path string, args ...string) (out io.Reader, wait func() error, err error)

// pmonSource streams `nvidia-smi pmon -i INDEX -s u -d SECONDS`: one
// long-lived process, whose rows are fed to a usageTracker as they come.
type pmonSource struct {
	smi      string
	index    int
	interval time.Duration // whole seconds, 1 to 10 (pmon's -d)
	start    startFunc
}

// pmonInterval is pmon's -d for a poll interval: whole seconds from 1 to
// 10, the range nvidia-smi accepts.
func pmonInterval(poll time.Duration) time.Duration {
	s := (poll + time.Second/2) / time.Second
	return min(max(s, 1), 10) * time.Second
}

func (p *pmonSource) args() []string {
	return []string{"pmon", "-i", strconv.Itoa(p.index), "-s", "u", "-d", strconv.Itoa(int(p.interval / time.Second))}
}

// run streams until ctx ends, starting nvidia-smi again (with backoff)
// whenever it ends, prints what is not pmon's output, or stops giving
// samples. Why it gives none is recorded in t until the next sample.
func (p *pmonSource) run(ctx context.Context, t *usageTracker) {
	restart.Loop(ctx, streamBackoffMin, streamBackoffMax,
		func(ctx context.Context) (bool, error) { return p.once(ctx, t) }, t.down)
}

// once runs nvidia-smi pmon until it ends or is stopped, and says why it
// stopped (nothing to say when ctx ended); rows reports whether it gave
// any sample.
func (p *pmonSource) once(ctx context.Context, t *usageTracker) (rows bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out, wait, err := p.start(ctx, p.smi, p.args()...)
	if err != nil {
		return false, fmt.Errorf("nvidia-smi pmon: %w", err)
	}
	r := &pmonReader{t: t}
	stall := 3*p.interval + stallSlack
	var stalled atomic.Bool
	watchdog := time.AfterFunc(stall, func() { stalled.Store(true); cancel() })
	readErr := r.read(out, func() { watchdog.Reset(stall) })
	watchdog.Stop()
	cancel()
	waitErr := wait()
	return r.rows, r.why(readErr, waitErr, stalled.Load(), stall)
}

// pmonReader reads one run's output.
type pmonReader struct {
	t           *usageTracker
	cols        pmonColumns
	header      bool   // the names header was read
	rows        bool   // a row was read
	note        string // the last line that was neither header nor row, before the header
	unsupported string // nvidia-smi's line saying the card cannot report
}

var errUnsupported = errors.New("not supported")

// read feeds each row to the tracker, calling row after each, until the
// output ends or a line is not pmon's.
func (r *pmonReader) read(out io.Reader, row func()) error {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "":
		case pmonUnsupported(line):
			r.unsupported = line
			return errUnsupported
		case strings.HasPrefix(line, "#"):
			if c, ok := pmonHeader(line); ok {
				r.cols, r.header = c, true
			}
		case !r.header:
			r.note = line // a message, such as "Failed to initialize NVML"
		default:
			u, idle, err := r.cols.row(line)
			if err != nil {
				return err
			}
			if !r.rows {
				r.rows = true
				r.t.down(nil)
			}
			if !idle {
				r.t.observe(time.Now(), u)
			}
			row()
		}
	}
	return sc.Err()
}

// why says why a run ended: off when the card reports no process use,
// an error otherwise.
func (r *pmonReader) why(readErr, waitErr error, stalled bool, stall time.Duration) error {
	unsupported := r.unsupported
	if unsupported == "" && waitErr != nil && pmonUnsupported(waitErr.Error()) {
		unsupported = waitErr.Error()
	}
	switch {
	case unsupported != "":
		return offf("nvidia-smi pmon: %s: this card does not report its processes' use (nvidia-smi documents pmon for bare-metal Linux and limited GeForce products)", unsupported)
	case stalled && r.header && !r.rows:
		return offf("nvidia-smi pmon printed its headers but no sample in %v: this card reports no process use", stall)
	case stalled:
		return fmt.Errorf("nvidia-smi pmon gave no sample in %v; started again", stall)
	case readErr != nil:
		return readErr
	case waitErr != nil && r.note != "":
		return fmt.Errorf("nvidia-smi pmon: %w (%s)", waitErr, r.note)
	case waitErr != nil:
		return fmt.Errorf("nvidia-smi pmon: %w", waitErr)
	}
	return errors.New("nvidia-smi pmon ended; started again")
}

// execStream is the startFunc of a real process.
func execStream(ctx context.Context, path string, args ...string) (io.Reader, func() error, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = smiWaitDelay
	stderr := &headBuffer{max: 4096}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	wait := func() error {
		err := cmd.Wait()
		if msg := firstLine(stderr.b); err != nil && msg != "" {
			return fmt.Errorf("%w: %s", err, msg)
		}
		return err
	}
	return out, wait, nil
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	b   []byte
	max int
}

func (h *headBuffer) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}
