package llamaswaptest

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
)

// The scheduler copies llama-swap's FIFO scheduler (router/scheduler/
// fifo.go) with its default group, which evicts every other running model.
// llama-swap runs it on one goroutine that handles one event at a time and
// stays busy for the whole of an unload; here holding loop (a one-place
// channel, so that a waiting request can give up) plays that goroutine.
// Every field of the scheduler's state is touched only with loop held.

// waiter is one request waiting for a grant.
type waiter struct {
	model  string
	result chan grant // buffered: a grant never blocks the scheduler
	done   bool       // granted (or refused); no longer queued or waiting
}

// grant is the scheduler's answer: a process to serve with, or an error.
type grant struct {
	proc *process
	err  error
}

// swap is one swap under way: stop evict, then start target.
type swap struct {
	target  string
	evict   []string
	waiters []*waiter
}

// lockLoop waits for the scheduler, or for ctx or the fake to end.
func (s *Server) lockLoop(ctx context.Context) error {
	select {
	case s.loop <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

func (s *Server) unlockLoop() { <-s.loop }

// schedule admits one request on model and waits for its grant. A request
// whose client goes away leaves the queue; if it had been granted a
// process meanwhile, that use ends at once.
func (s *Server) schedule(ctx context.Context, model string) (*process, error) {
	w := &waiter{model: model, result: make(chan grant, 1)}
	if err := s.lockLoop(ctx); err != nil {
		return nil, err
	}
	s.onRequestLocked(w)
	s.unlockLoop()
	select {
	case g := <-w.result:
		return g.proc, g.err
	case <-ctx.Done():
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
	if s.lockLoop(s.ctx) != nil {
		return nil, ctx.Err()
	}
	defer s.unlockLoop()
	if !w.done {
		s.removeLocked(w)
		return nil, ctx.Err()
	}
	if g := <-w.result; g.proc != nil {
		s.serveDoneLocked(model)
	}
	return nil, ctx.Err()
}

// onRequestLocked is llama-swap's OnRequest: admission against the
// concurrency limit, then the decision tree.
func (s *Server) onRequestLocked(w *waiter) {
	if s.reserved[w.model] >= s.opts.ConcurrencyLimit {
		w.done = true
		w.result <- grant{err: errConcurrencyLimit}
		return
	}
	s.reserved[w.model]++
	if !s.decideLocked(w) {
		s.queued = append(s.queued, w)
		s.gpu.Mark(service, "queued "+w.model)
	}
}

// decideLocked joins a swap to the request's model, serves it at once from
// a ready process that nothing evicts, or starts a swap; it returns false
// when the request must queue: its swap would collide with one under way,
// or would evict a process that is still serving requests.
func (s *Server) decideLocked(w *waiter) bool {
	if sw := s.active[w.model]; sw != nil {
		sw.waiters = append(sw.waiters, w)
		return true
	}
	evict := s.evictionLocked(w.model)
	collides := s.collidesLocked(w.model, evict)
	if s.procs[w.model].State() == stateReady && len(evict) == 0 && !collides {
		s.grantServeLocked(w)
		return true
	}
	if collides || s.servingLocked(evict) {
		return false
	}
	s.active[w.model] = &swap{target: w.model, evict: evict, waiters: []*waiter{w}}
	go s.runSwap(w.model, evict)
	return true
}

// evictionLocked is the default group's eviction set: every other model
// that runs or that a swap under way is starting.
func (s *Server) evictionLocked(target string) []string {
	var evict []string
	for _, m := range s.models {
		if m == target {
			continue
		}
		if s.procs[m].State() != stateStopped || s.active[m] != nil {
			evict = append(evict, m)
		}
	}
	sort.Strings(evict)
	return evict
}

// collidesLocked reports whether a swap to target evicting evict would
// interfere with a swap under way.
func (s *Server) collidesLocked(target string, evict []string) bool {
	for id, sw := range s.active {
		if id == target {
			continue
		}
		if slices.Contains(evict, id) || slices.Contains(sw.evict, target) {
			return true
		}
		for _, e := range evict {
			if slices.Contains(sw.evict, e) {
				return true
			}
		}
	}
	return false
}

// servingLocked reports whether any of models has requests in flight.
func (s *Server) servingLocked(models []string) bool {
	for _, m := range models {
		if s.inFlight[m] > 0 {
			return true
		}
	}
	return false
}

func (s *Server) grantServeLocked(w *waiter) {
	w.done = true
	s.inFlight[w.model]++
	w.result <- grant{proc: s.procs[w.model]}
}

func (s *Server) grantErrorLocked(w *waiter, err error) {
	w.done = true
	s.reserved[w.model]--
	w.result <- grant{err: err}
}

// removeLocked takes a request whose client went away out of the queue and
// the swaps' waiters.
func (s *Server) removeLocked(w *waiter) {
	w.done = true
	s.reserved[w.model]--
	s.queued = slices.DeleteFunc(s.queued, func(q *waiter) bool { return q == w })
	for _, sw := range s.active {
		sw.waiters = slices.DeleteFunc(sw.waiters, func(q *waiter) bool { return q == w })
	}
}

// drainQueueLocked runs the decision again for every queued request, in
// order; those still blocked stay queued in their order.
func (s *Server) drainQueueLocked() {
	pending := s.queued
	s.queued = nil
	for _, w := range pending {
		if !s.decideLocked(w) {
			s.queued = append(s.queued, w)
		}
	}
}

// serveDone ends one served request: its model may now be evicted.
func (s *Server) serveDone(model string) {
	if s.lockLoop(context.Background()) != nil {
		return
	}
	s.serveDoneLocked(model)
	s.unlockLoop()
}

func (s *Server) serveDoneLocked(model string) {
	s.inFlight[model]--
	s.reserved[model]--
	if s.inFlight[model] <= 0 {
		delete(s.inFlight, model)
		s.drainQueueLocked()
	}
}

// runSwap stops the evicted processes, then brings the target up, and
// hands the result to every request that joined the swap. As in
// llama-swap, it finds its swap by model: one that an unload has removed
// is gone, and its result is dropped, though the start went ahead.
func (s *Server) runSwap(target string, evict []string) {
	var wg sync.WaitGroup
	for _, m := range evict {
		wg.Go(s.procs[m].stop)
	}
	wg.Wait()
	err := s.procs[target].ensureReady(s.ctx)
	if s.lockLoop(s.ctx) != nil {
		return
	}
	defer s.unlockLoop()
	sw := s.active[target]
	if sw == nil {
		return
	}
	delete(s.active, target)
	for _, w := range sw.waiters {
		if err != nil {
			s.grantErrorLocked(w, err)
		} else {
			s.grantServeLocked(w)
		}
	}
	s.drainQueueLocked()
}

// unload is llama-swap's Unload: it fails the requests waiting for the
// targets, stops the targets' processes and returns once they have
// exited, holding the scheduler all the while. It does not wait for the
// requests the processes were serving: stopping cuts them.
func (s *Server) unload(targets []string) {
	if s.lockLoop(s.ctx) != nil {
		return
	}
	defer s.unlockLoop()
	s.gpu.Mark(service, "unload of "+strings.Join(targets, ","))
	for _, t := range targets {
		if sw := s.active[t]; sw != nil {
			for _, w := range sw.waiters {
				s.grantErrorLocked(w, errUnloaded)
			}
			delete(s.active, t)
		}
	}
	kept := s.queued[:0]
	for _, w := range s.queued {
		if slices.Contains(targets, w.model) {
			s.grantErrorLocked(w, errUnloaded)
		} else {
			kept = append(kept, w)
		}
	}
	s.queued = kept
	var wg sync.WaitGroup
	for _, t := range targets {
		// llama-swap's stop of a stopped process lands at once and does
		// nothing; decided here, it cannot land late on a start that came
		// after it.
		if p := s.procs[t]; p.State() != stateStopped {
			wg.Go(p.stop)
		}
	}
	wg.Wait()
	s.gpu.Mark(service, "unload done")
	s.drainQueueLocked()
}
