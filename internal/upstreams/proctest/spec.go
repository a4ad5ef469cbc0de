package proctest

import (
	"os"
	"strings"
	"time"
)

// The roles a re-executed test binary can take.
const (
	roleFront = "front"
	roleModel = "model"
)

// frontSpec is what a front is started with.
type frontSpec struct {
	Backend    string        `json:"backend"`
	Port       int           `json:"port"`
	DrainLimit time.Duration `json:"drain_limit"`
}

// modelSpec is what a model server stand-in is started with.
type modelSpec struct {
	Listen         bool          `json:"listen"`
	StopDelay      time.Duration `json:"stop_delay"`
	LoadFor        time.Duration `json:"load_for"`
	ExitOnStdinEOF bool          `json:"exit_on_stdin_eof"`
}

// command is one order from the test process to a front, a line of JSON
// on the front's standard input.
type command struct {
	Op    string       `json:"op"` // "spawn" or "close-stdin"
	ID    int          `json:"id"`
	Child int          `json:"child,omitempty"` // close-stdin: the spawn's ID
	Spawn ChildOptions `json:"spawn"`
}

// message is one line of JSON a front writes on its standard output: its
// port first, then the answers to commands by ID, and Closed when its
// port has closed at SIGTERM.
type message struct {
	Port   int    `json:"port,omitempty"`
	ID     int    `json:"id,omitempty"`
	PID    int    `json:"pid,omitempty"`
	Holder int    `json:"holder,omitempty"`
	Closed bool   `json:"closed,omitempty"`
	Err    string `json:"err,omitempty"`
}

// childReport is what a model server writes on reportFD once it listens.
type childReport struct {
	PID  int `json:"pid"`
	Port int `json:"port"`
}

// roleEnviron is this process's environment for a process of role with
// spec, without this process's own role.
func roleEnviron(role string, spec []byte) []string {
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, roleEnv+"=") && !strings.HasPrefix(kv, specEnv+"=") {
			env = append(env, kv)
		}
	}
	return append(env, roleEnv+"="+role, specEnv+"="+string(spec))
}
