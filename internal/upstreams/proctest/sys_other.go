//go:build !unix

package proctest

import (
	"os"
	"syscall"
)

// supported: without Unix's sessions, process groups and signals, a test
// that needs a front is skipped.
const supported = false

func signalChild(pid int, group bool, sig syscall.Signal) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

func sessionAttr(bool) *syscall.SysProcAttr { return nil }

func groupAttr(bool) *syscall.SysProcAttr { return nil }

// watchExit is never called where fronts do not run.
func watchExit(int) <-chan struct{} {
	done := make(chan struct{})
	close(done)
	return done
}
