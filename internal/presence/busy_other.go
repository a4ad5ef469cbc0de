//go:build !windows

package presence

import (
	"context"
	"errors"
	"os/exec"
	"time"
)

// busySource is nvidia-smi pmon's stream for GPU index, sampling every
// whole second near poll; it needs nvidia-smi.
func busySource(index int, poll time.Duration) (func(context.Context, *usageTracker), time.Duration, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, 0, errors.New("nvidia-smi not found in PATH, so the GPU's use by process cannot be seen")
	}
	p := &pmonSource{smi: path, index: index, interval: pmonInterval(poll), start: execStream}
	return p.run, p.interval, nil
}
