package fleet

import (
	"sync"
	"sync/atomic"
	"time"
)

// settleFor is how long a model this front sent to a host still counts as
// there once its last request ended: the time the host takes to look at
// its engine again and say so in its status.
const settleFor = 2 * time.Second

// maxSending bounds the models a Follower remembers sending.
const maxSending = 16

// sending is what this front has sent to one host of one model: a model
// loads on the first request that names it, and an engine does not list
// it until it has loaded (Ollama's /api/ps, for seconds), so without this
// every chat for it in the meantime would go to a host where it is cold.
type sending struct {
	model    string
	inFlight int
	ended    time.Time // when the last request ended, while none is in flight
}

// sent is a Follower's record of the models sent to its host.
type sent struct {
	mu     sync.Mutex
	models []sending
	n      atomic.Int32 // len(models): most hosts, most of the time, have none
}

// begin counts a request for model sent to the host.
func (s *sent) begin(model string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.find(model); i >= 0 {
		s.models[i].inFlight++
		return
	}
	if len(s.models) >= maxSending {
		s.forgetOldest()
	}
	s.models = append(s.models, sending{model: model, inFlight: 1})
	s.n.Store(int32(len(s.models)))
}

// end counts one request for model as ended at now; served is false when
// the host refused it (it loaded nothing).
func (s *sent) end(model string, now time.Time, served bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(model)
	if i < 0 {
		return
	}
	m := &s.models[i]
	m.inFlight--
	if m.inFlight > 0 {
		return
	}
	if served {
		m.ended = now
	} else if m.ended.IsZero() {
		s.models = append(s.models[:i], s.models[i+1:]...)
		s.n.Store(int32(len(s.models)))
	}
}

// has reports whether model is in flight to the host, or its last request
// ended less than settleFor before now.
func (s *sent) has(model string, now time.Time) bool {
	if s.n.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.find(model)
	return i >= 0 && (s.models[i].inFlight > 0 || now.Sub(s.models[i].ended) < settleFor)
}

func (s *sent) find(model string) int {
	for i := range s.models {
		if s.models[i].model == model {
			return i
		}
	}
	return -1
}

// forgetOldest drops the model whose last request ended first; if every
// one is in flight, the first.
func (s *sent) forgetOldest() {
	oldest := 0
	for i, m := range s.models {
		if m.inFlight == 0 && (s.models[oldest].inFlight > 0 || m.ended.Before(s.models[oldest].ended)) {
			oldest = i
		}
	}
	s.models = append(s.models[:oldest], s.models[oldest+1:]...)
	s.n.Store(int32(len(s.models)))
}
