package llamacpptest

import "time"

// Tasks and --sleep-idle-seconds. Every request a model's process handles
// (generations, /tokenize, /slots, /metrics; not /health, /props or
// /models) is a task. A loaded model with no task for SleepIdle frees its
// memory and sleeps; the next task blocks while it reloads.

// armIdleLocked starts the idle timer of a loaded child with no task.
func (s *Server) armIdleLocked(c *child) {
	if s.opts.SleepIdle <= 0 || c.tasks > 0 || c.m.status != statusLoaded || c.m.child != c {
		return
	}
	c.idleGen++
	gen := c.idleGen
	c.idle = time.AfterFunc(s.opts.SleepIdle, func() { s.sleep(c, gen) })
}

// sleep frees the model's memory; the process stays.
func (s *Server) sleep(c *child, gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || c.m.child != c || gen != c.idleGen || c.tasks > 0 || c.m.status != statusLoaded {
		return // a task came, or the child is gone
	}
	select {
	case <-c.stopping:
		return
	default:
	}
	c.release("sleep " + c.m.id)
	c.release = nil
	c.m.status = statusSleeping
	s.changedLocked()
}

// beginTaskLocked counts a task on the child and returns a channel to wait
// on while a sleeping model reloads (nil when it is awake).
func (s *Server) beginTaskLocked(c *child) <-chan struct{} {
	c.tasks++
	c.idleGen++ // disarms a pending idle timer
	if c.idle != nil {
		c.idle.Stop()
		c.idle = nil
	}
	if c.m.status != statusSleeping {
		return nil
	}
	if c.waking == nil {
		c.waking = make(chan struct{})
		c.release = s.occupy(c, "reload "+c.m.id)
		if s.single != nil {
			s.loads.Add(1)
		}
		go s.wake(c, c.waking)
	}
	return c.waking
}

// wake reloads a sleeping model (handle_sleeping_state(false)).
func (s *Server) wake(c *child, woken chan struct{}) {
	select {
	case <-time.After(s.opts.LoadDelay):
	case <-c.stopping:
		return // exiting; its waiters see it exit
	case <-s.done:
		return
	}
	s.mu.Lock()
	if s.failNext[c.m.id] {
		delete(s.failNext, c.m.id)
		s.mu.Unlock()
		s.failLoad(c, "reload of "+c.m.id+" failed") // GGML_ABORT
		return
	}
	c.waking = nil
	if c.m.child == c && c.m.status == statusSleeping {
		c.m.status = statusLoaded
		s.changedLocked()
	}
	s.gpu.Mark(service, "awake "+c.m.id) // before the waiting tasks run
	close(woken)
	s.mu.Unlock()
}

// endTask ends a task; the idle timer restarts when it was the last.
func (s *Server) endTask(c *child) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.tasks--
	s.armIdleLocked(c)
}
