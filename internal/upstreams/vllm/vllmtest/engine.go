package vllmtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
)

// pause is the scheduler's pause state, as vLLM's PauseState.
type pause int

const (
	unpaused  pause = iota
	pausedNew       // new requests queue; those in flight go on (abort, wait)
	pausedAll       // nothing is stepped (keep)
)

// engine is the fake's engine core: its scheduler's pause state, its
// memory's sleep state and the requests in flight.
type engine struct {
	s *Server

	// ops serializes the memory operations, as vLLM's engine core runs one
	// utility call at a time; a wait-mode sleep drains outside it.
	ops sync.Mutex

	mu         sync.Mutex
	pause      pause
	changed    chan struct{} // closed (and replaced) when pause changes
	weightsOff bool          // the weights are asleep (offloaded or discarded)
	kvOff      bool          // the KV cache is asleep
	discarded  bool          // the last sleep was level 2
	empty      bool          // woke with discarded weights, not reloaded since
	release    func(string)  // the memory's GPU occupancy; nil while asleep
	running    map[*request]bool
	idle       chan struct{} // closed when running empties; nil while empty
	queued     int
}

// request is one request the engine is running.
type request struct {
	abort chan struct{} // closed by a sleep in abort mode
}

// errAborted ends a request aborted by a sleep.
var errAborted = errors.New("aborted by sleep")

// admit waits until scheduling runs, as vLLM queues every new request while
// paused, then counts the request as running.
func (e *engine) admit(ctx context.Context, what string) (*request, error) {
	e.mu.Lock()
	if e.pause != unpaused {
		e.s.gpu.Mark(service, "queued "+what)
	}
	for e.pause != unpaused {
		changed := e.changed
		e.queued++
		e.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
		case <-e.s.ctx.Done():
		}
		e.mu.Lock()
		e.queued--
		if err := errors.Join(ctx.Err(), e.s.ctx.Err()); err != nil {
			e.mu.Unlock()
			return nil, err
		}
	}
	rq := &request{abort: make(chan struct{})}
	if len(e.running) == 0 {
		e.idle = make(chan struct{})
	}
	e.running[rq] = true
	e.mu.Unlock()
	return rq, nil
}

// step waits while everything is paused (keep mode) and reports whether the
// request may produce its next token: errAborted once a sleep aborted it.
func (e *engine) step(ctx context.Context, rq *request) error {
	e.mu.Lock()
	for e.pause == pausedAll {
		changed := e.changed
		e.mu.Unlock()
		select {
		case <-changed:
		case <-rq.abort:
			return errAborted
		case <-ctx.Done():
			return ctx.Err()
		case <-e.s.ctx.Done():
			return e.s.ctx.Err()
		}
		e.mu.Lock()
	}
	e.mu.Unlock()
	select {
	case <-rq.abort:
		return errAborted
	default:
		return nil
	}
}

// finish ends a request's run.
func (e *engine) finish(rq *request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.running, rq)
	if len(e.running) == 0 && e.idle != nil {
		close(e.idle)
		e.idle = nil
	}
}

// sleep is EngineCore.sleep: pause the scheduler as mode says, deal with
// the requests in flight, then, from level 1, free the memory.
func (e *engine) sleep(level int, mode string) error {
	if level < 0 || level > 2 {
		return fmt.Errorf("invalid sleep level: %d", level)
	}
	if !slices.Contains([]string{"abort", "wait", "keep"}, mode) {
		return fmt.Errorf("invalid pause mode: %s", mode)
	}
	e.mu.Lock()
	if mode == "keep" {
		e.setPauseLocked(pausedAll)
	} else {
		e.setPauseLocked(pausedNew)
	}
	if mode == "abort" {
		for rq := range e.running {
			close(rq.abort)
			delete(e.running, rq) // aborted: vLLM frees them at once
		}
		if e.idle != nil {
			close(e.idle)
			e.idle = nil
		}
	}
	idle := e.idle
	e.mu.Unlock()
	e.s.gpu.Mark(service, fmt.Sprintf("pause, mode %s, for level %d", mode, level))
	if mode == "wait" && idle != nil {
		select {
		case <-idle: // the requests in flight have finished
		case <-e.s.ctx.Done():
			return e.s.ctx.Err()
		}
	}
	if level >= 1 {
		e.offload(level)
	}
	return nil
}

// offload frees the memory: the weights go to host RAM (level 1) or are
// discarded (level 2), the KV cache is discarded. An engine already asleep
// is left as it is, as vLLM's executor does.
func (e *engine) offload(level int) {
	e.ops.Lock()
	defer e.ops.Unlock()
	e.mu.Lock()
	asleep := e.weightsOff || e.kvOff
	e.mu.Unlock()
	if asleep {
		return
	}
	fakeserver.Sleep(e.s.ctx.Done(), e.s.opts.SleepDelay)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.weightsOff, e.kvOff, e.discarded = true, true, level >= 2
	if e.release != nil {
		e.release(fmt.Sprintf("sleep level %d", level))
		e.release = nil
	}
}

// wakeUp is EngineCore.wake_up: bring back the tagged memory (all of it
// for no tags), then resume scheduling if nothing sleeps any more.
func (e *engine) wakeUp(tags []string) {
	e.ops.Lock()
	defer e.ops.Unlock()
	if tags != nil {
		tags = slices.DeleteFunc(tags, func(t string) bool { return t == "scheduling" })
	}
	if tags == nil || len(tags) > 0 {
		e.wakeMemory(tags)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.weightsOff && !e.kvOff && e.pause != unpaused {
		e.setPauseLocked(unpaused)
		e.s.gpu.Mark(service, "resume")
	}
}

// setPauseLocked changes the pause state and wakes whoever waits on it.
func (e *engine) setPauseLocked(p pause) {
	e.pause = p
	close(e.changed)
	e.changed = make(chan struct{})
}

// wakeMemory brings the tagged memory back onto the GPU.
func (e *engine) wakeMemory(tags []string) {
	weights := tags == nil || slices.Contains(tags, "weights")
	kv := tags == nil || slices.Contains(tags, "kv_cache")
	e.mu.Lock()
	needed := (weights && e.weightsOff) || (kv && e.kvOff)
	e.mu.Unlock()
	if !needed {
		return // vLLM's executor is not sleeping: nothing to do
	}
	fakeserver.Sleep(e.s.ctx.Done(), e.s.opts.WakeDelay)
	e.mu.Lock()
	defer e.mu.Unlock()
	if weights && e.weightsOff {
		e.weightsOff = false
		e.empty = e.discarded
	}
	if kv {
		e.kvOff = false
	}
	if e.release == nil {
		e.release = e.s.occupy("wake")
	}
}

// reloadWeights is collective_rpc's reload_weights: the weights are real
// again.
func (e *engine) reloadWeights() {
	e.mu.Lock()
	e.empty = false
	e.mu.Unlock()
}

// emptyWeights reports whether the weights came back empty (level 2).
func (e *engine) emptyWeights() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.empty
}

func (e *engine) isSleeping() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pause != unpaused || e.weightsOff || e.kvOff
}

func (e *engine) queuedNow() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.queued
}

// exit frees the memory with the process.
func (e *engine) exit() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.release != nil {
		e.release("exit")
		e.release = nil
	}
}
