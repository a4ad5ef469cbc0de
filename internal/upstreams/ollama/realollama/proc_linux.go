//go:build linux

package realollama

import (
	"time"

	"golang.org/x/sys/unix"
)

func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

func closeFD(fd int) { unix.Close(fd) }

// waitFD waits until the pidfd is readable: the process has exited.
func waitFD(fd int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0
	}
}
