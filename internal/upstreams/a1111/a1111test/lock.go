package a1111test

import "sync"

// fifoLock is modules/fifo_lock.FIFOLock, the queue_lock that the API's
// GPU routes and the Gradio UI share: one holder at a time, granted in the
// order of asking.
type fifoLock struct {
	mu      sync.Mutex
	held    bool
	waiters []chan struct{} // each closed to hand the lock to its waiter
}

// join asks for the lock: it takes it at once (turn is nil) or queues
// behind everyone who asked before, and turn is closed when the lock is
// handed over. Joining first and waiting later lets a caller take its
// place in the queue before it blocks.
func (l *fifoLock) join() (turn chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held && len(l.waiters) == 0 {
		l.held = true
		return nil
	}
	turn = make(chan struct{})
	l.waiters = append(l.waiters, turn)
	return turn
}

// await waits for a turn given by join. It gives up, without the lock,
// only when stop closes (the server is closing): A1111 never abandons a
// waiter otherwise, not even one whose client has gone.
func (l *fifoLock) await(turn chan struct{}, stop <-chan struct{}) bool {
	if turn == nil {
		return true
	}
	select {
	case <-turn:
		return true
	case <-stop:
	}
	l.mu.Lock()
	for i, w := range l.waiters {
		if w == turn {
			l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
			l.mu.Unlock()
			return false
		}
	}
	l.mu.Unlock()
	// The lock was handed over while we gave up: pass it on.
	l.unlock()
	return false
}

// unlock hands the lock to the longest waiter, or frees it.
func (l *fifoLock) unlock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.waiters) == 0 {
		l.held = false
		return
	}
	next := l.waiters[0]
	l.waiters = l.waiters[1:]
	close(next) // held stays true: the lock passes straight to next
}

// waiting is how many wait for the lock.
func (l *fifoLock) waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.waiters)
}
