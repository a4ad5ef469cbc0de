package presence

import (
	"context"
	"testing"
)

// runWatcher runs w until the test ends, and waits for it (and for any
// nvidia-smi it runs) before the test's directories go. The channel it
// returns gets a value after each sample; one is kept while the test is
// not reading.
func runWatcher(t *testing.T, w *Watcher) <-chan struct{} {
	sampled := make(chan struct{}, 1)
	w.OnSample(func() {
		select {
		case sampled <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return sampled
}
