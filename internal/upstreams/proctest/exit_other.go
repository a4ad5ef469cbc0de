//go:build unix && !linux

package proctest

import (
	"syscall"
	"time"
)

// watchExit returns a channel closed when process pid has exited and been
// reaped, by asking the kernel every few milliseconds.
func watchExit(pid int) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for syscall.Kill(pid, 0) == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return done
}
