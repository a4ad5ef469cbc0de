package presence

import (
	"context"
	"time"
)

// pdhRetry is how long a PDH query that cannot be opened waits before it
// is tried again.
const pdhRetry = time.Minute

// busySource is the PDH GPU Engine counters' use of the 3D engines by
// process, read every poll from one query kept open. WDDM reports it for
// every GPU; index is not used (the sums cover every adapter).
func busySource(_ int, poll time.Duration) (func(context.Context, *usageTracker), time.Duration, error) {
	return func(ctx context.Context, t *usageTracker) { runPDH(ctx, t, poll) }, poll, nil
}

// runPDH feeds t from the PDH query until ctx ends.
func runPDH(ctx context.Context, t *usageTracker, every time.Duration) {
	q, err := openPDH()
	for err != nil {
		t.down(err)
		if !sleepCtx(ctx, pdhRetry) {
			return
		}
		q, err = openPDH()
	}
	defer q.close()
	t.down(nil)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for sleepTick(ctx, tick) {
		vals, err := q.sample()
		t.down(err)
		now := time.Now()
		for _, u := range usesByPID(vals) {
			t.observe(now, u)
		}
	}
}

// sleepCtx waits for d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// sleepTick waits for the next tick; false if ctx ended first.
func sleepTick(ctx context.Context, tick *time.Ticker) bool {
	select {
	case <-ctx.Done():
		return false
	case <-tick.C:
		return true
	}
}
