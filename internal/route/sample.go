package route

import "sync/atomic"

// Always is how many requests through a Sampler are all checked, after
// a config load: a misrouted site is seen at its first requests.
const Always = 100

// Every is the sampling rate after the first Always requests: one request
// in Every is checked, which keeps the check off the LLM fast path's cost.
const Every = 64

// Sampler decides which requests through one handler are checked. Each
// config load makes new handlers, and so new Samplers. LLM requests come
// at most some thousands a second: one counter shared by them is no
// point of contention. Its zero value is ready. It holds a plain counter
// (updated atomically), so that a handler holding one may be copied
// while it is not in use, as Caddy copies module values.
type Sampler struct {
	n uint64
}

// Due reports whether this request is to be checked.
func (s *Sampler) Due() bool {
	n := atomic.AddUint64(&s.n, 1)
	return n <= Always || n%Every == 0
}
