// Package restart keeps a long-lived source running (one nvidia-smi
// stream): started again whenever it ends, after a pause that grows while
// it keeps failing.
package restart

import (
	"context"
	"time"
)

// Loop calls run until ctx ends. Each time run returns while ctx has
// not ended, Loop calls ended with run's error and pauses before the next
// run: first at first, twice as long after each further end, at most
// most. A run that made progress (gave a reading) and lasted at least
// most sets the pause back to first; one that comes up and dies at once is not
// restarted in a tight loop. Loop returns once ctx has ended and run has
// returned.
func Loop(ctx context.Context, first, most time.Duration, run func(context.Context) (progress bool, err error), ended func(error)) {
	pause := first
	for ctx.Err() == nil {
		began := time.Now()
		progress, err := run(ctx)
		if ctx.Err() != nil {
			return
		}
		ended(err)
		if progress && time.Since(began) >= most {
			pause = first
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, most)
	}
}
