package gpu

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// memStore is a HoldStore in memory.
type memStore struct {
	mu   sync.Mutex
	recs map[string]SavedHold
	dels []string
}

func (s *memStore) Save(h SavedHold) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[h.ID] = h
	return nil
}

func (s *memStore) Delete(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, id)
	s.dels = append(s.dels, id)
	return nil
}

func (s *memStore) Load() ([]SavedHold, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SavedHold
	for _, h := range s.recs {
		out = append(out, h)
	}
	return out, nil
}

func (s *memStore) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id := range s.recs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// At start-up the latest hold still in its lease is taken again at once,
// with its id and lease; older and expired records are deleted; the
// remaining lease ends it.
func TestRestoreHoldAtStartUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		store := &memStore{recs: map[string]SavedHold{
			"live":    {ID: "live", Owner: "game", TTL: time.Minute, Since: now.Add(-time.Minute), ExpiresAt: now.Add(2 * time.Minute)},
			"older":   {ID: "older", Owner: "x", TTL: time.Minute, Since: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)},
			"expired": {ID: "expired", Owner: "y", TTL: time.Minute, Since: now.Add(-2 * time.Minute), ExpiresAt: now.Add(-time.Second)},
		}}
		g, m := newFakeGPU(t, &fakeLLM{loaded: []string{"m1"}}, func(c *Config) { c.HoldStore = store })
		// Held from Apply on: no LLM request can get in. The hold is
		// restored on the GPU's own goroutine.
		if g.lock.TryAcquireShared() {
			t.Fatalf("after Apply: %v, want held", g.State())
		}
		synctest.Wait()
		if g.State() != lock.Hold {
			t.Fatalf("after the start-up: %v, want held", g.State())
		}
		h := g.FindHold("live")
		if h == nil || h.Owner != "game" || !h.Status().ExpiresAt.Equal(now.Add(2*time.Minute)) {
			t.Fatalf("restored hold %+v", h)
		}
		synctest.Wait()
		if got := store.ids(); !slices.Equal(got, []string{"live"}) {
			t.Fatalf("saved holds %v, want only live", got)
		}
		if got := m.get(&m.steps); len(got) != 1 || got[0] != "unload" {
			t.Fatalf("steps %v: the restored hold did not empty the LLM engine", got)
		}
		time.Sleep(2*time.Minute - time.Second)
		synctest.Wait()
		if g.State() != lock.Hold {
			t.Fatalf("a second before the lease ends: %v", g.State())
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if g.State() == lock.Hold || g.FindHold("live") != nil {
			t.Fatalf("after the lease: %v, want the hold ended", g.State())
		}
		if len(store.ids()) != 0 {
			t.Fatalf("the expired hold is still saved: %v", store.ids())
		}
		if ev := m.get(&m.holds); !slices.Equal(ev, []string{"restored", "expired"}) {
			t.Fatalf("hold events %v", ev)
		}
	})
}

// A hold ended by shutdown stays saved; one released is deleted.
func TestHoldStoreOnEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &memStore{recs: map[string]SavedHold{}}
		g, _ := newFakeGPU(t, &fakeLLM{}, func(c *Config) { c.HoldStore = store })
		h, err := g.TakeHold(t.Context(), "a", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got := store.ids(); !slices.Equal(got, []string{h.ID}) {
			t.Fatalf("saved %v, want %s", got, h.ID)
		}
		h.End("released")
		if len(store.ids()) != 0 {
			t.Fatal("a released hold is still saved")
		}
		h, err = g.TakeHold(t.Context(), "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		h.End("shutdown")
		if got := store.ids(); !slices.Equal(got, []string{h.ID}) {
			t.Fatalf("after shutdown saved %v, want %s", got, h.ID)
		}
	})
}

// stuckStore is a hold store whose Load does not return until release is
// closed.
type stuckStore struct {
	memStore
	release chan struct{}
}

func (s *stuckStore) Load() ([]SavedHold, error) {
	<-s.release
	return nil, nil
}

// A hold store that does not answer holds the start-up up for
// restoreTimeout at most, LLM requests held back meanwhile, and does not
// hold Close up at all.
func TestRestoreIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &stuckStore{release: make(chan struct{})}
		defer close(store.release)
		g, _ := newFakeGPU(t, &fakeLLM{}, func(c *Config) { c.HoldStore = store })
		l := g.lock
		time.Sleep(restoreTimeout - time.Second)
		synctest.Wait()
		if l.TryAcquireShared() {
			t.Fatal("an LLM request got in while the hold store was being read")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !l.TryAcquireShared() {
			t.Fatalf("past restoreTimeout the start-up still holds the GPU: %v", g.State())
		}
		l.ReleaseShared()
		g.Close() // returns with the store still stuck
	})
}
