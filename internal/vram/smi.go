package vram

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/restart"
)

// waitDelay bounds how long a killed nvidia-smi may keep its output open
// (through a child, or a wrapper script's): past it the pipes are closed,
// so a context's end is felt at once.
const waitDelay = 200 * time.Millisecond

// gpuQuery is what a reading asks of the card, in this order.
const gpuQuery = "--query-gpu=uuid,memory.total,memory.free"

// csv asks for the values alone: no header, no units (MiB).
var csv = []string{"--format=csv,noheader,nounits"}

// Reading is the card's memory at one instant.
type Reading struct {
	UUID  string    // the card's UUID (GPU-...), the key its footprints are kept under
	Total int64     // bytes
	Free  int64     // bytes, across every process
	At    time.Time // when it was read
}

// Read reads the card once.
func Read(ctx context.Context, smiPath string, index int) (Reading, error) {
	out, err := run(ctx, smiPath, gpuArgs(index)...)
	if err != nil {
		return Reading{}, err
	}
	return parseReading(strings.TrimSpace(string(out)), time.Now())
}

// Processes returns the memory each compute process uses on the card, in
// bytes by PID. A process nvidia-smi cannot attribute memory to
// ([N/A]: Windows' WDDM, a container without the permission) is left
// out.
func Processes(ctx context.Context, smiPath string, index int) (map[int32]int64, error) {
	out, err := run(ctx, smiPath, append([]string{"--query-compute-apps=pid,used_memory", "-i", strconv.Itoa(index)}, csv...)...)
	if err != nil {
		return nil, err
	}
	procs := map[int32]int64{}
	for line := range strings.Lines(string(out)) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("nvidia-smi: unexpected compute-apps line %q", line)
		}
		pid, err := strconv.ParseInt(f[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi: unexpected compute-apps line %q", line)
		}
		mib, ok := parseMiB(f[1])
		if !ok {
			continue
		}
		procs[int32(pid)] += mib
	}
	return procs, nil
}

// Stream reads the card every interval through one long-lived nvidia-smi
// (-lms) until ctx ends, and calls each with every reading or error, in
// order, from one goroutine. An nvidia-smi that exits, or prints what is
// not a reading, is reported and started again after a pause that grows
// from interval to a minute while it keeps failing. Stream returns once
// ctx has ended and its process has been reaped.
func Stream(ctx context.Context, smiPath string, index int, interval time.Duration, each func(Reading, error)) {
	interval = max(interval, 10*time.Millisecond)
	restart.Loop(ctx, interval, time.Minute,
		func(ctx context.Context) (bool, error) { return stream(ctx, smiPath, index, interval, each) },
		func(err error) {
			if err == nil {
				err = errors.New("nvidia-smi: exited")
			}
			each(Reading{}, err)
		})
}

// stream runs one nvidia-smi -lms until it exits or ctx ends, and
// reports whether it gave a reading.
func stream(ctx context.Context, smiPath string, index int, interval time.Duration, each func(Reading, error)) (read bool, err error) {
	args := append(gpuArgs(index), "-lms", strconv.FormatInt(interval.Milliseconds(), 10))
	cmd := exec.CommandContext(ctx, smiPath, args...)
	cmd.WaitDelay = waitDelay
	var stderr strings.Builder
	cmd.Stderr = &limited{w: &stderr, n: 512}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return false, err
	}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("nvidia-smi: %w", err)
	}
	sc := bufio.NewScanner(out)
	var bad error
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		r, err := parseReading(line, time.Now())
		if err != nil {
			bad = err
			break // an nvidia-smi that prints what is not a reading is restarted, not believed
		}
		read = true
		each(r, nil)
	}
	_ = cmd.Process.Kill()
	werr := cmd.Wait()
	switch {
	case bad != nil:
		return read, bad
	case werr != nil && stderr.Len() > 0:
		return read, fmt.Errorf("nvidia-smi: %v: %s", werr, strings.TrimSpace(stderr.String()))
	case werr != nil:
		return read, fmt.Errorf("nvidia-smi: %w", werr)
	}
	return read, nil
}

func gpuArgs(index int) []string {
	return append([]string{gpuQuery, "-i", strconv.Itoa(index)}, csv...)
}

// parseReading parses "UUID, TOTAL_MIB, FREE_MIB".
func parseReading(line string, at time.Time) (Reading, error) {
	f := fields(line)
	if len(f) != 3 {
		return Reading{}, fmt.Errorf("nvidia-smi: unexpected reading %q", line)
	}
	total, ok1 := parseMiB(f[1])
	free, ok2 := parseMiB(f[2])
	if !ok1 || !ok2 || total <= 0 || free > total {
		return Reading{}, fmt.Errorf("nvidia-smi: unexpected reading %q", line)
	}
	return Reading{UUID: f[0], Total: total, Free: free, At: at}, nil
}

func fields(line string) []string {
	f := strings.Split(line, ",")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}

// parseMiB reads a whole number of MiB as bytes; not ok for [N/A] and
// the like.
func parseMiB(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 1<<40 {
		return 0, false
	}
	return n << 20, true
}

// run runs nvidia-smi once, bounded by ctx.
func run(ctx context.Context, smiPath string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, smiPath, args...)
	cmd.WaitDelay = waitDelay
	var stderr strings.Builder
	cmd.Stderr = &limited{w: &stderr, n: 512}
	out, err := cmd.Output()
	if err != nil {
		if s := strings.TrimSpace(stderr.String()); s != "" {
			return nil, fmt.Errorf("nvidia-smi: %v: %s", err, s)
		}
		return nil, fmt.Errorf("nvidia-smi: %w", err)
	}
	return out, nil
}

// limited keeps at most n bytes of what is written to it.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
