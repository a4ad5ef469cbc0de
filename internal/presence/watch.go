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
// period, so a sampler that fails for good keeps an engaged hold engaged;
// an [*OffError] (the condition cannot be judged here) counts as clear.
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

// A streamer is a Sampler whose source runs beside the samples (one
// long-lived nvidia-smi, one open PDH query): Run feeds it until ctx
// ends, and the Watcher runs it for as long as it samples.
type streamer interface {
	Run(ctx context.Context)
}

// Run samples at once and then every poll until ctx ends. Each sample is
// bounded by the poll interval (at least 10s). It does not call release
// when ctx ends: a caller that shuts down ends its hold itself. A
// Sampler with a source of its own (a stream) has it run meanwhile, and
// Run returns once it has stopped.
func (w *Watcher) Run(ctx context.Context) {
	if st, ok := w.s.(streamer); ok {
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); st.Run(ctx) }()
		defer func() { cancel(); <-done }()
	}
	tick := time.NewTicker(w.poll)
	defer tick.Stop()
	var j judge
	for {
		sctx, cancel := context.WithTimeout(ctx, max(w.poll, minSampleTimeout))
		owner, present, err := w.s.Sample(sctx)
		cancel()
		if ctx.Err() != nil {
			return // a sample cut short by the end is no sample
		}
		w.judge(&j, time.Now(), owner, present, err)
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

// judge is what Run remembers between samples.
type judge struct {
	clearSince time.Time // first clear sample while engaged; zero when none
	errMsg     string    // the last error logged, "" after a good sample
}

// judge turns one sample into engage or release. An error changes
// nothing, unless it says the condition is off: that counts as clear.
func (w *Watcher) judge(j *judge, now time.Time, owner string, present bool, err error) {
	switch {
	case err != nil && !IsOff(err):
		if err.Error() != j.errMsg {
			j.errMsg = err.Error()
			w.log.Warn("presence sample failed; holding state until a sample succeeds", zap.Error(err))
		}
		w.setErr(err)
	case err == nil && present:
		w.recovered(&j.errMsg)
		j.clearSince = time.Time{}
		if w.start(owner) {
			w.log.Info("presence detected: holding the GPU", zap.String("owner", owner))
			w.engage(owner)
		}
	default:
		if err != nil {
			if err.Error() != j.errMsg {
				j.errMsg = err.Error()
				w.log.Warn("presence condition off; it counts as clear", zap.Error(err))
			}
			w.setErr(err)
		} else {
			w.recovered(&j.errMsg)
		}
		w.clear(j, now)
	}
}

// clear handles a clear sample: release once clear for releaseAfter.
func (w *Watcher) clear(j *judge, now time.Time) {
	if !w.isEngaged() {
		return
	}
	if j.clearSince.IsZero() {
		j.clearSince = now
	}
	if clear := now.Sub(j.clearSince); clear >= w.releaseAfter {
		j.clearSince = time.Time{}
		w.stop()
		w.log.Info("presence clear: releasing the GPU", zap.Duration("clear_for", clear))
		w.release()
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

// Resume marks the Watcher engaged by owner before Run starts: its
// condition's hold outlived a reload, and this Watcher, not the one
// before, must release it once the condition clears.
func (w *Watcher) Resume(owner string) { w.start(owner) }

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
