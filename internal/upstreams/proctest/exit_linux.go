package proctest

import (
	"errors"

	"golang.org/x/sys/unix"
)

// watchExit returns a channel closed when process pid exits: through a
// pidfd, which is readable from the exit on, whether or not a parent has
// reaped it, and names that process whoever the PID goes to later.
func watchExit(pid int) <-chan struct{} {
	done := make(chan struct{})
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		close(done) // gone already
		return done
	}
	go func() {
		defer close(done)
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			if _, err := unix.Poll(fds, -1); !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
	return done
}
