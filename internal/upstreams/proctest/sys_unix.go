//go:build unix

package proctest

import "syscall"

// supported: fronts and their children run here.
const supported = true

// signalChild signals pid, or its whole group when it leads one.
func signalChild(pid int, group bool, sig syscall.Signal) error {
	if group {
		return syscall.Kill(-pid, sig)
	}
	return syscall.Kill(pid, sig)
}

// sessionAttr starts a process in a session of its own if setsid.
func sessionAttr(setsid bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: setsid}
}

// groupAttr starts a process in a process group of its own if setpgid.
func groupAttr(setpgid bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: setpgid}
}
