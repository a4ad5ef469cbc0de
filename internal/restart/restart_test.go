package restart

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// Failing runs are started again after pauses that double up to the
// most; a run that gave readings for long enough starts them over.
func TestLoopPauses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var starts []time.Duration
		var ends int
		begin := time.Now()
		run := func(ctx context.Context) (bool, error) {
			starts = append(starts, time.Since(begin))
			switch len(starts) {
			case 4: // a healthy run of a minute
				time.Sleep(time.Minute)
				return true, nil
			case 6:
				cancel()
				<-ctx.Done()
			}
			return false, errors.New("exited")
		}
		Loop(ctx, time.Second, 4*time.Second, run, func(error) { ends++ })
		want := []time.Duration{0, 1, 3, 7, 68, 70}
		for i := range want {
			want[i] *= time.Second
		}
		if !slices.Equal(starts, want) {
			t.Fatalf("runs started at %v, want %v", starts, want)
		}
		if ends != 5 {
			t.Fatalf("ended called %d times, want 5 (not for the run cut short by the end)", ends)
		}
	})
}
