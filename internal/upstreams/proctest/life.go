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

var (
	lifeOnce sync.Once
	lifeR    *os.File // given to every front and, through it, to every model server
	lifeW    *os.File // kept open by the test process alone (close-on-exec), never closed
	lifeErr  error
)

// lifePipe is the test binary's life pipe: its read end reaches end of
// file when the test binary exits, however it exits.
func lifePipe() (*os.File, error) {
	lifeOnce.Do(func() { lifeR, lifeW, lifeErr = os.Pipe() })
	return lifeR, lifeErr
}

// exitAtEndOfLife makes this process exit when the test binary has
// exited.
func exitAtEndOfLife() {
	life := os.NewFile(lifeFD, "life")
	go func() {
		var b [1]byte
		for {
			if _, err := life.Read(b[:]); err != nil {
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
