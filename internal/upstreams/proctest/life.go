package proctest

import (
	"os"
	"sync"
)

// The file descriptors a front and a model server find open.
const (
	lifeFD   = 3 // read end of the life pipe: end of file when the test binary has exited
	reportFD = 4 // a model server's: where it writes its PID and port (childReport)
)

// roleEnv marks a process started as a front or a model server; specEnv
// holds its options (JSON).
const (
	roleEnv = "PROCTEST_ROLE"
	specEnv = "PROCTEST_SPEC"
)

// life is the test binary's life pipe: its read end is given to every
// front and, through it, to every model server; its write end is kept open
// by the test process alone (close-on-exec) and never closed, held here
// so that no finalizer closes it. In a front, r is the read end it
// inherited and w is nil.
var life struct {
	once sync.Once
	r, w *os.File
	err  error
}

// lifePipe is the read end of the life pipe: it reaches end of file when
// the test binary exits, however it exits.
func lifePipe() (*os.File, error) {
	life.once.Do(func() { life.r, life.w, life.err = os.Pipe() })
	return life.r, life.err
}

// exitAtEndOfLife makes this process exit when the test binary has
// exited. The inherited read end becomes this process's life pipe, the
// one a front gives its model servers: one *os.File for the descriptor,
// as a second would close it when garbage-collected.
func exitAtEndOfLife() {
	r := os.NewFile(lifeFD, "life")
	life.once.Do(func() { life.r = r })
	go func() {
		var b [1]byte
		for {
			if _, err := r.Read(b[:]); err != nil {
				os.Exit(0)
			}
		}
	}()
}

// init runs a front or a model server in a process started as one.
func init() {
	switch os.Getenv(roleEnv) {
	case roleFront:
		exitAtEndOfLife()
		runFront()
		os.Exit(0)
	case roleModel:
		exitAtEndOfLife()
		runModel()
		os.Exit(0)
	}
}
