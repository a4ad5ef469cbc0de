package gputest

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
)

// exitWatch tells whether one process has exited: through a pidfd, which
// names that very process (never a later one with its PID) and becomes
// readable when it exits, zombie or reaped.
type exitWatch struct {
	mu   sync.Mutex
	fd   int // -1: closed, or the process was gone from the start
	gone bool
}

// watchProcess opens a pidfd on id's PID and checks, after, that the
// process has id's start time: one that was alive before the pidfd was
// opened and is still alive after is the one it names.
func watchProcess(id procs.ID) *exitWatch {
	w := &exitWatch{fd: -1, gone: true}
	if id.PID <= 0 || id.Start == 0 {
		return w
	}
	fd, err := unix.PidfdOpen(int(id.PID), 0)
	if err != nil {
		return w
	}
	tb, err := procs.Snapshot(context.Background())
	if err != nil || !tb.Alive(id) {
		unix.Close(fd)
		return w
	}
	w.fd, w.gone = fd, false
	return w
}

// exited reports whether the process has exited, without waiting.
func (w *exitWatch) exited() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.gone {
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err == nil && n > 0 {
			w.gone = true
		}
	}
	return w.gone
}

// close releases the pidfd.
func (w *exitWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
	w.gone = true
}

// waitExit returns when one of ws's processes exits, or after at most
// period (for charges added meanwhile). A closed watch is left out.
func waitExit(ws []*exitWatch, period time.Duration) {
	fds := make([]unix.PollFd, 0, len(ws))
	for _, w := range ws {
		w.mu.Lock()
		if w.fd >= 0 {
			// A duplicate, so that a close meanwhile cannot hand the
			// number to another file this poll would then watch;
			// close-on-exec, so that the processes the test starts
			// meanwhile (fronts, model servers) do not inherit it.
			if d, err := unix.FcntlInt(uintptr(w.fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
				fds = append(fds, unix.PollFd{Fd: int32(d), Events: unix.POLLIN})
			}
		}
		w.mu.Unlock()
	}
	unix.Poll(fds, int(period.Milliseconds()))
	for _, f := range fds {
		unix.Close(int(f.Fd))
	}
}
