// Package lock is the mode lock of a GPU turnstile: many shared holders (LLM
// requests) or one exclusive holder (an image job, an external hold or a
// presence hold), never both.
//
// The lock prefers writers: once an exclusive waiter is queued, new shared
// holders wait while those already in flight drain. Exclusive waiters are
// served in arrival order, except presence holds (the person at the
// machine): they go to the front of the queue, behind earlier presence
// holds only. Nothing is cut short for them: the exclusive holder keeps
// the lock until it releases, and shared holders in flight drain. A waiter
// whose context ends leaves the queue at once and wakes whoever can now
// proceed.
//
// The lock also tracks one debt: after an image job, the image engine may
// still hold models (and an LLM engine put to sleep must be woken). That
// debt passes from one exclusive holder to the next (no free between
// consecutive image jobs), and is paid through Effects.Free before the GPU
// goes to shared use or to idle, whoever released last.
//
// One exception lets shared holders meet an exclusive one: while an image
// job holds the lock, TryAcquireBeside admits shared holders beside it
// (co-residency), as the caller's check of the card's memory says, made
// under the lock's mutex. They never meet a hold: none is admitted while
// a hold waits, and an exclusive waiter is granted only once every shared
// holder has left. When the job releases the lock with such holders in
// flight, they stay as ordinary shared holders (state llm) once the job's
// debt is paid.
//
// The package has no goroutines, timers, logging or HTTP: callers bring
// contexts, and side effects go through the Effects interface.
package lock

import (
	"container/list"
	"context"
	"sync"
)

// Effects performs the side effects the lock orders. The lock calls them
// without holding its mutex, except Transition.
type Effects interface {
	// Free empties the image engines (their models and caches) before the
	// GPU leaves exclusive use. It is called by the goroutine that
	// released the lock, while the lock still counts as exclusive, and must
	// return within its own deadline: the lock waits for it.
	Free()
	// Transition reports a change of state. It is called with the lock's
	// mutex held, so it must be quick and must not call the lock.
	Transition(from, to State)
}

// Observer is told of every change of the lock: its state, its holders,
// its waiters, its debt and its free. If the Effects given to New also
// implement it, Changed is called with the lock's mutex held, so a change
// that is undone at once is still seen. snap returns the lock's snapshot
// as of that change; it may be called only within Changed, and costs
// nothing unless called, so an observer that nobody watches pays for
// none. Changed must be quick, must not block and must not call the lock.
type Observer interface {
	Changed(snap func() Snapshot)
}

// Options are the lock's policy settings.
type Options struct {
	// MaxExclusiveStreak bounds how many exclusive holders in a row may be
	// granted while shared waiters wait. Once reached, the shared waiters
	// get a turn before the next exclusive waiter, unless that is a
	// presence hold: the person at the machine goes first regardless, and
	// the shared turn comes at the first release that finds no presence
	// hold waiting. A presence grant counts in the streak like any other,
	// so a waiting shared holder sees at most MaxExclusiveStreak grants of
	// image jobs and external holds, plus the presence holds granted
	// meanwhile. Zero means no bound (strict exclusive priority).
	MaxExclusiveStreak int
}

// Lock is the mode lock. The zero value is not usable; call New.
type Lock struct {
	effects  Effects
	observer Observer        // nil if effects is not one
	snap     func() Snapshot // snapshotLocked, bound once: the observer's argument
	opts     Options

	mu       sync.Mutex
	shared   int   // shared holders
	beside   int   // of which admitted beside the image job that holds the lock (TryAcquireBeside)
	excl     State // the exclusive holder's state (Image or Hold), or Idle for none
	freeing  bool  // a Free is running for the last exclusive holder
	owesFree bool  // an image engine may still hold a previous image job's models
	streak   int   // exclusive grants in a row while shared waiters waited

	// exclQ holds the exclusive waiters: the presence holds first, then the
	// others, each in arrival order. qKinds counts them per kind.
	exclQ  list.List
	qKinds [PresenceHold + 1]int

	// Shared waiters are admitted all at once: each waits on gate, which is
	// closed (and replaced) when they are admitted. sharedQ counts them.
	sharedQ int
	gate    chan struct{}
}

type exclWaiter struct {
	kind  Kind
	ready chan struct{} // closed when the lock is granted to this waiter
}

// New returns an idle lock that orders its side effects through effects.
func New(effects Effects, opts Options) *Lock {
	obs, _ := effects.(Observer)
	l := &Lock{effects: effects, observer: obs, opts: opts, gate: make(chan struct{})}
	l.snap = l.snapshotLocked
	return l
}

// SetOptions changes the policy; it applies from the next decision on.
func (l *Lock) SetOptions(opts Options) {
	l.mu.Lock()
	l.opts = opts
	l.mu.Unlock()
}

// TryAcquireShared takes a shared hold if that is possible without waiting:
// no exclusive holder, no exclusive waiter. It never allocates.
func (l *Lock) TryAcquireShared() bool {
	l.mu.Lock()
	ok := l.sharedFree()
	if ok {
		l.addShared(1)
		l.changed()
	}
	l.mu.Unlock()
	return ok
}

// AcquireShared takes a shared hold, waiting while an exclusive holder or
// waiter exists. On ctx's end it returns ctx.Err() and holds nothing; a
// context already done gets nothing, even when the lock is free.
func (l *Lock) AcquireShared(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	if l.sharedFree() {
		l.addShared(1)
		l.unlockChanged()
		return nil
	}
	gate := l.gate
	l.sharedQ++
	l.unlockChanged()

	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		select {
		case <-gate:
			// Admitted while the context ended: this waiter is already
			// counted as a holder, so give the hold back.
			l.mu.Unlock()
			l.ReleaseShared()
		default:
			l.sharedQ--
			l.unlockChanged()
		}
		return ctx.Err()
	}
}

// ReleaseShared gives back a shared hold. The last one out hands the lock
// to the first exclusive waiter.
func (l *Lock) ReleaseShared() {
	l.mu.Lock()
	if l.shared <= 0 {
		l.mu.Unlock()
		panic("lock: ReleaseShared without a shared hold")
	}
	l.shared--
	switch {
	case l.beside > 0:
		l.beside-- // the image job still holds the lock
	case l.shared == 0 && !l.grantNextExclusive(LLM):
		l.effects.Transition(LLM, Idle)
	}
	l.unlockChanged()
}

// TryAcquireBeside takes a shared hold beside the image job that holds
// the lock, if fits says the card has room for it: no free runs, no hold
// (external or presence) waits, and fits() is true. fits is called with
// the lock's mutex held, so the job it judges is the one holding the lock
// when the hold is taken; it must be quick and must not call the lock.
// ReleaseShared gives the hold back.
func (l *Lock) TryAcquireBeside(fits func() bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.excl != Image || l.freeing || l.qKinds[ExternalHold] > 0 || l.qKinds[PresenceHold] > 0 || !fits() {
		return false
	}
	l.shared++
	l.beside++
	l.changed()
	return true
}

// AcquireExclusive takes the lock for one exclusive holder of the given
// kind, after the shared holders drain and the exclusive waiters ahead of
// it are served. An ImageJob or ExternalHold queues behind every exclusive
// waiter; a PresenceHold queues behind the presence holds only, ahead of
// the image jobs and external holds that wait, and is not held back by
// the streak bound (see Options). On ctx's end it returns ctx.Err() and
// holds nothing. A context already done gets nothing, even when the lock
// is free: the LLM engines must not be emptied for a client that has gone.
func (l *Lock) AcquireExclusive(ctx context.Context, kind Kind) error {
	if !kind.valid() {
		panic("lock: exclusive kind must be ImageJob, ExternalHold or PresenceHold")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	if l.exclusiveFree() {
		l.grantExclusive(kind, Idle)
		l.unlockChanged()
		return nil
	}
	w := &exclWaiter{kind: kind, ready: make(chan struct{})}
	elem := l.enqueue(w)
	l.unlockChanged()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		select {
		case <-w.ready:
			// Granted while the context ended: this waiter holds the lock
			// now, with whatever debt came with it. Release it through the
			// normal path so the debt is paid and the next waiter served.
			l.mu.Unlock()
			l.ReleaseExclusive(false)
		default:
			l.exclQ.Remove(elem)
			l.qKinds[kind]--
			// The lock may have been kept from shared waiters only by
			// this waiter.
			if l.sharedFree() && l.sharedQ > 0 {
				l.admitSharedWaiters()
			}
			l.unlockChanged()
		}
		return ctx.Err()
	}
}

// TryAcquireExclusive takes the lock for one exclusive holder of the given
// kind only if that is possible without waiting: no shared holder, no
// exclusive holder, no free running and no exclusive waiter queued. It
// never queues, so the waiters' order is untouched (a PresenceHold too is
// refused while any waiter is queued); false means nothing is held.
func (l *Lock) TryAcquireExclusive(kind Kind) bool {
	if !kind.valid() {
		panic("lock: exclusive kind must be ImageJob, ExternalHold or PresenceHold")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.exclusiveFree() {
		return false
	}
	l.grantExclusive(kind, Idle)
	l.changed()
	return true
}

// ReleaseExclusive gives back the exclusive hold. jobRan says whether this
// holder left models in an image engine (an image job ran), which adds to
// the debt it may have inherited. If another exclusive waiter is queued,
// the lock and the debt pass straight to the first of them and
// ReleaseExclusive returns true, unless the streak bound gives the shared
// waiters a turn first (never ahead of a presence hold). Otherwise the
// debt is paid with Effects.Free in this goroutine, then the waiting
// shared holders are admitted, and it returns false.
func (l *Lock) ReleaseExclusive(jobRan bool) (handedOver bool) {
	l.mu.Lock()
	if l.excl == Idle || l.freeing {
		l.mu.Unlock()
		panic("lock: ReleaseExclusive without an exclusive hold")
	}
	l.owesFree = l.owesFree || jobRan
	for {
		if l.exclusiveTurn() && l.grantNextExclusive(l.excl) {
			l.unlockChanged()
			return true
		}
		if !l.owesFree {
			break
		}
		// Pay the debt while still exclusive: a waiter that arrives
		// meanwhile queues, and is served once the free is done.
		l.freeing = true
		l.unlockChanged()
		l.effects.Free()
		l.mu.Lock()
		l.freeing = false
		l.owesFree = false
	}
	from := l.excl
	// The shared waiters' turn, judged before the streak is reset: no
	// exclusive waiter goes first (one does here only when holders
	// admitted beside the job kept it from being granted above).
	sharedTurn := l.sharedQ > 0 && (l.exclQ.Len() == 0 || !l.exclusiveTurn())
	l.excl = Idle
	l.beside = 0 // holders admitted beside the job are ordinary shared holders now
	l.streak = 0
	switch {
	case sharedTurn:
		l.admitSharedWaiters()
		l.effects.Transition(from, LLM)
	case l.shared > 0:
		// Holders admitted beside the job are still in flight: the next
		// exclusive waiter is granted once they have left.
		l.effects.Transition(from, LLM)
	default:
		l.effects.Transition(from, Idle)
		// A shared turn whose waiters all left meanwhile must not stall
		// the exclusive waiters it held back.
		l.grantNextExclusive(Idle)
	}
	l.unlockChanged()
	return false
}

// OwesFree reports whether an image engine may still hold a previous
// job's models.
func (l *Lock) OwesFree() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owesFree
}

// Paid tells the lock that the exclusive holder has freed the image
// engines itself (an external hold does on entry), so the debt is
// settled.
func (l *Lock) Paid() {
	l.mu.Lock()
	l.owesFree = false
	l.unlockChanged()
}

// changed tells the observer, if any, of a change; l.mu is held.
func (l *Lock) changed() {
	if l.observer != nil {
		l.observer.Changed(l.snap)
	}
}

// unlockChanged tells the observer of a change and unlocks l.mu.
func (l *Lock) unlockChanged() {
	l.changed()
	l.mu.Unlock()
}

func (l *Lock) stateLocked() State {
	switch {
	case l.excl != Idle:
		return l.excl
	case l.shared > 0:
		return LLM
	}
	return Idle
}

// exclusiveFree reports whether an exclusive holder may enter at once:
// nobody holds the lock, no free runs, nobody waits.
func (l *Lock) exclusiveFree() bool { return l.shared == 0 && l.sharedFree() }

// sharedFree reports whether a new shared holder may enter at once.
func (l *Lock) sharedFree() bool {
	return l.excl == Idle && !l.freeing && l.exclQ.Len() == 0
}

func (l *Lock) addShared(n int) {
	if l.shared == 0 {
		l.effects.Transition(Idle, LLM)
	}
	l.shared += n
}

// sharedTurnDue reports whether the fairness bound gives the waiting shared
// holders the next turn ahead of the exclusive waiters.
func (l *Lock) sharedTurnDue() bool {
	return l.opts.MaxExclusiveStreak > 0 && l.sharedQ > 0 && l.streak >= l.opts.MaxExclusiveStreak
}

// exclusiveTurn reports whether the first exclusive waiter, if any, goes
// before the waiting shared holders: always for a presence hold (they are
// queued first), otherwise unless the fairness bound gives the shared
// waiters their turn.
func (l *Lock) exclusiveTurn() bool {
	return l.qKinds[PresenceHold] > 0 || !l.sharedTurnDue()
}

// enqueue queues an exclusive waiter: a presence hold behind the presence
// holds at the front, any other kind at the back.
func (l *Lock) enqueue(w *exclWaiter) *list.Element {
	l.qKinds[w.kind]++
	if w.kind == PresenceHold {
		for e := l.exclQ.Front(); e != nil; e = e.Next() {
			if e.Value.(*exclWaiter).kind != PresenceHold {
				return l.exclQ.InsertBefore(w, e)
			}
		}
	}
	return l.exclQ.PushBack(w)
}

// grantNextExclusive hands the lock to the first exclusive waiter if no
// shared holder is left. from is the state the lock leaves: the releasing
// exclusive holder's kind, LLM when the last shared holder left, or Idle.
func (l *Lock) grantNextExclusive(from State) bool {
	front := l.exclQ.Front()
	if front == nil || l.shared > 0 {
		return false
	}
	w := l.exclQ.Remove(front).(*exclWaiter)
	l.qKinds[w.kind]--
	l.grantExclusive(w.kind, from)
	close(w.ready)
	return true
}

func (l *Lock) grantExclusive(kind Kind, from State) {
	l.excl = kind.State()
	if l.sharedQ > 0 {
		l.streak++
	}
	if from != l.excl {
		l.effects.Transition(from, l.excl)
	}
}

func (l *Lock) admitSharedWaiters() {
	n := l.sharedQ
	l.sharedQ = 0
	l.streak = 0
	l.shared += n
	close(l.gate)
	l.gate = make(chan struct{})
}
