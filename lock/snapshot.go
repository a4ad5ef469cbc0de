package lock

// Snapshot is a consistent view of the lock at one instant.
type Snapshot struct {
	State           State
	Shared          int  // shared holders
	Beside          int  // of which admitted beside the image job holding the lock
	SharedWaiting   int  // shared waiters
	ImageWaiting    int  // queued image waiters
	HoldWaiting     int  // queued hold waiters, external and presence (both are state Hold)
	PresenceWaiting int  // the presence holds among HoldWaiting
	Freeing         bool // the last exclusive holder's free is running
	OwesFree        bool // an image engine may still hold a previous job's models
	Streak          int  // exclusive grants in a row while shared waiters waited
	// SharedWaits is set when a new shared holder would have to wait (an
	// exclusive holder, waiter or free): TryAcquireShared's own rule.
	SharedWaits bool
}

// Snapshot returns the lock's current state.
func (l *Lock) Snapshot() Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snapshotLocked()
}

// View calls f with the lock's snapshot, under the lock's mutex: what f
// reads of its own state under its own mutex (taken inside the lock's,
// never the other way round) is of the same instant as the snapshot. f
// must be quick and must not call the lock.
func (l *Lock) View(f func(Snapshot)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f(l.snapshotLocked())
}

func (l *Lock) snapshotLocked() Snapshot {
	return Snapshot{
		State:           l.stateLocked(),
		Shared:          l.shared,
		Beside:          l.beside,
		SharedWaiting:   l.sharedQ,
		ImageWaiting:    l.qKinds[ImageJob],
		HoldWaiting:     l.qKinds[ExternalHold] + l.qKinds[PresenceHold],
		PresenceWaiting: l.qKinds[PresenceHold],
		Freeing:         l.freeing,
		OwesFree:        l.owesFree,
		Streak:          l.streak,
		SharedWaits:     !l.sharedFree(),
	}
}

// State returns the current state.
func (l *Lock) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stateLocked()
}
