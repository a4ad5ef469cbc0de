package gpu

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// fakeBody is a Body whose reading fails with err, or else is its own
// Ticket, counting what ServeLLM does with it.
type fakeBody struct {
	err                   error
	admitted, stops, done int
}

func (b *fakeBody) Admit(time.Time) (Ticket, error) {
	if b.err != nil {
		return nil, b.err
	}
	b.admitted++
	return b, nil
}
func (b *fakeBody) Waiter() Waiter { return Waiter{Path: "/api/chat", Model: "llama3.2"} }
func (b *fakeBody) StopWaiting()   { b.stops++ }
func (b *fakeBody) Done()          { b.done++ }

func (r *recorder) waitsOf() []lock.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lock.State(nil), r.waits...)
}

// idleGPU is a GPU with no engines, idle after its start-up.
func idleGPU(t *testing.T) (*GPU, *recorder) {
	t.Helper()
	m := &recorder{}
	g := New("test", m)
	t.Cleanup(g.Close)
	g.Apply(testConfig(), zap.NewNop())
	waitStatus(t, g, "idle after start-up", func(st Status) bool { return st.State == "idle" })
	return g, m
}

// heldGPU is idleGPU held by a hold, which the test ends.
func heldGPU(t *testing.T) (*GPU, *recorder, *Hold) {
	t.Helper()
	g, m := idleGPU(t)
	h, err := g.TakeHold(context.Background(), "game", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return g, m, h
}

func TestServeLLMRejectsWhileHeld(t *testing.T) {
	g, _, h := heldGPU(t)
	defer h.End("released")
	body := &fakeBody{}
	s := g.ServeLLM(context.Background(), LLMRun{Reject: true, Wait: time.Minute, Arrival: time.Now(), Body: body,
		Forward: ForwardFunc(func(*Answered) error { t.Error("forwarded while the GPU is held"); return nil })})
	if s.Answer != LLMBusy || s.Cause != "an external hold" || body.admitted != 0 {
		t.Fatalf("served %+v, body read %d times; want busy with an external hold, the body unread", s, body.admitted)
	}
}

func TestServeLLMWaitsThenForwards(t *testing.T) {
	g, m, h := heldGPU(t)
	body := &fakeBody{}
	served := make(chan LLMServed, 1)
	forwarded := false
	go func() {
		served <- g.ServeLLM(context.Background(), LLMRun{Wait: time.Minute, Arrival: time.Now(), Body: body,
			Forward: ForwardFunc(func(a *Answered) error {
				forwarded = a == nil // no memory-aware admission to tell
				return nil
			})})
	}()
	waitStatus(t, g, "the request waiting", func(st Status) bool { return st.LLMWaiting == 1 })
	h.End("released")
	s := <-served
	if s.Answer != LLMForwarded || s.Err != nil || !forwarded {
		t.Fatalf("served %+v, forwarded %v", s, forwarded)
	}
	if body.stops == 0 || body.done != 1 {
		t.Errorf("the ticket was stopped %d times and done %d times", body.stops, body.done)
	}
	if !slices.Contains(m.waitsOf(), lock.LLM) {
		t.Error("the LLM wait was not reported to the metrics")
	}
	waitStatus(t, g, "the place given back", func(st Status) bool { return st.LLMInflight == 0 && st.State == "idle" })
}

func TestServeLLMWaitTimesOut(t *testing.T) {
	g, _, h := heldGPU(t)
	defer h.End("released")
	body := &fakeBody{}
	s := g.ServeLLM(context.Background(), LLMRun{Wait: 20 * time.Millisecond, Arrival: time.Now(), Body: body,
		Forward: ForwardFunc(func(*Answered) error { t.Error("forwarded while the GPU is held"); return nil })})
	if s.Answer != LLMNotAdmitted || !errors.Is(s.Err, ErrWaitTimeout) || s.Cause != "an external hold" || body.done != 1 {
		t.Fatalf("served %+v, ticket done %d times", s, body.done)
	}
}

func TestServeLLMUnreadBodyHoldsNothing(t *testing.T) {
	g, _ := idleGPU(t)
	bad := errors.New("unreadable body")
	s := g.ServeLLM(context.Background(), LLMRun{Wait: time.Minute, Arrival: time.Now(), Body: &fakeBody{err: bad},
		Forward: ForwardFunc(func(*Answered) error { t.Error("forwarded without a body"); return nil })})
	if s.Answer != LLMNotAdmitted || s.Err != bad {
		t.Fatalf("served %+v", s)
	}
	if st := g.Status(); st.LLMInflight != 0 {
		t.Fatalf("%d shared places still held", st.LLMInflight)
	}
}

func TestServeLLMForwardThatPanicsGivesThePlaceBack(t *testing.T) {
	g, _ := idleGPU(t)
	abort := errors.New("abort")
	func() {
		defer func() {
			if v := recover(); v != abort {
				t.Errorf("recovered %v; want the forward's panic", v)
			}
		}()
		g.ServeLLM(context.Background(), LLMRun{Wait: time.Minute, Arrival: time.Now(), Body: &fakeBody{},
			Forward: ForwardFunc(func(*Answered) error { panic(abort) })})
	}()
	if st := g.Status(); st.LLMInflight != 0 {
		t.Fatalf("%d shared places still held after the forward panicked", st.LLMInflight)
	}
}

// anonBody is a fakeBody whose request names no model.
type anonBody struct{ fakeBody }

func (b *anonBody) Admit(d time.Time) (Ticket, error) { b.fakeBody.Admit(d); return b, nil }
func (b *anonBody) Waiter() Waiter                    { return Waiter{Path: "/api/chat"} }

// TestServeLLMAdmittedAtOnceAllocates: with vram_admission, a request
// that holds a place and fits at once costs its Admission (which keeps
// what the forward saw of the answer) and nothing else: no context, no
// closure, no notices' wiring.
func TestServeLLMAdmittedAtOnceAllocates(t *testing.T) {
	f := memFixture(t, nil, nil)
	if !f.g.TryLLM() {
		t.Fatal("the GPU is not free for LLM use")
	}
	defer f.g.ReleaseLLM()
	body := &anonBody{}
	answered := 0
	fwd := ForwardFunc(func(a *Answered) error {
		if a != nil {
			answered++
		}
		return nil
	})
	ctx := context.Background()
	n := testing.AllocsPerRun(100, func() {
		s := f.g.ServeLLM(ctx, LLMRun{Wait: time.Minute, Arrival: time.Now(), Body: body, Forward: fwd})
		if s.Answer != LLMForwarded {
			t.Fatalf("served %+v", s)
		}
	})
	if answered != 101 || body.done != 101 {
		t.Fatalf("%d forwards told the answer, %d tickets done; want 101", answered, body.done)
	}
	if n > 1 {
		t.Fatalf("%v allocations per request admitted at once, want 1 (its Admission)", n)
	}
}
