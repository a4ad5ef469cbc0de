package fakeserver

import (
	"sync"
	"sync/atomic"
)

// Gate holds work at one point until the test that closed it releases it:
// a fake's HoldChats or HoldJobs. Its zero value is open.
type Gate struct {
	held atomic.Pointer[chan struct{}]
}

// Hold closes the gate until resume is called; resume may be called more
// than once.
func (g *Gate) Hold() (resume func()) {
	ch := make(chan struct{})
	g.held.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { g.held.Store(nil); close(ch) }) }
}

// Held returns, while the gate is closed, a channel closed when it is
// resumed; nil while it is open.
func (g *Gate) Held() <-chan struct{} {
	if ch := g.held.Load(); ch != nil {
		return *ch
	}
	return nil
}
