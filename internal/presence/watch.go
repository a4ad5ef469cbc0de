package presence

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
)

// minSampleTimeout bounds one sample when the poll interval is shorter: two
// nvidia-smi runs and a walk of the process table can take more than a
// short interval on a loaded machine, and a sample cut short is an error.
const minSampleTimeout = 10 * time.Second

// A Watcher turns a Sampler's samples into a hold's engage and release:
// engage fast, release slow.
type Watcher struct {
	s            Sampler
	poll         time.Duration
	releaseAfter time.Duration
	log          *zap.Logger
	engage       func(owner string)
	release      func()
	sampled      func()

	mu      sync.Mutex
	owner   string // the owner engage was called with, while engaged
	engaged bool
	lastErr error
}

// NewWatcher returns a Watcher that samples s every poll (a poll of 0 or
// less is taken as 2s, the contract's default). Run calls engage(owner) on
// the first sample that sees presence, and release() once presence has
// stayed clear for releaseAfter: release comes on a clear sample at least
// releaseAfter after the first clear sample, with no positive sample in
// between (a positive one restarts the clear period). A sample error is
// logged (once per change of error, and once when sampling recovers) and
// changes nothing: it neither engages, nor releases, nor restarts the clear
// period, so a sampler that fails for good keeps an engaged hold engaged.
// engage and release are called from Run's goroutine, never at once. log
// may be nil.
func NewWatcher(s Sampler, poll, releaseAfter time.Duration, log *zap.Logger, engage func(owner string), release func()) *Watcher {
	if poll <= 0 {
		poll = 2 * time.Second
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Watcher{s: s, poll: poll, releaseAfter: releaseAfter, log: log.With(zap.Stringer("presence", s)), engage: engage, release: release}
}

// Run samples at once and then every poll until ctx ends. Each sample is
// bounded by the poll interval (at least 10s). It does not call release
// when ctx ends: a caller that shuts down ends its hold itself.
func (w *Watcher) Run(ctx context.Context) {
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	var clearSince time.Time // first clear sample while engaged; zero when none
	var errMsg string        // the last error logged, "" after a good sample
	for {
		sctx, cancel := context.WithTimeout(ctx, max(w.poll, minSampleTimeout))
		owner, present, err := w.s.Sample(sctx)
		cancel()
		if ctx.Err() != nil {
			return // a sample cut short by the end is no sample
		}
		now := time.Now()
		switch {
		case err != nil:
			if err.Error() != errMsg {
				errMsg = err.Error()
				w.log.Warn("presence sample failed; holding state until a sample succeeds", zap.Error(err))
			}
			w.setErr(err)
		case present:
			w.recovered(&errMsg)
			clearSince = time.Time{}
			if w.start(owner) {
				w.log.Info("presence detected: holding the GPU", zap.String("owner", owner))
				w.engage(owner)
			}
		default:
			w.recovered(&errMsg)
			if !w.isEngaged() {
				break
			}
			if clearSince.IsZero() {
				clearSince = now
			}
			if clear := now.Sub(clearSince); clear >= w.releaseAfter {
				clearSince = time.Time{}
				w.stop()
				w.log.Info("presence clear: releasing the GPU", zap.Duration("clear_for", clear))
				w.release()
			}
		}
		if w.sampled != nil {
			w.sampled()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// OnSample sets f to be called after each sample has been judged (and
// engage or release called), whether or not what Status reports changed.
// It must be set before Run.
func (w *Watcher) OnSample(f func()) { w.sampled = f }

// Status reports whether the Watcher is engaged, with the owner engage was
// called with, and the last sample's error (nil after a good sample).
func (w *Watcher) Status() (owner string, engaged bool, lastErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.owner, w.engaged, w.lastErr
}

func (w *Watcher) recovered(errMsg *string) {
	if *errMsg != "" {
		*errMsg = ""
		w.log.Info("presence sampling works again")
	}
	w.setErr(nil)
}

func (w *Watcher) setErr(err error) {
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
}

// start marks the Watcher engaged by owner; false if it already was.
func (w *Watcher) start(owner string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.engaged {
		return false
	}
	w.owner, w.engaged = owner, true
	return true
}

func (w *Watcher) stop() {
	w.mu.Lock()
	w.owner, w.engaged = "", false
	w.mu.Unlock()
}

func (w *Watcher) isEngaged() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.engaged
}
