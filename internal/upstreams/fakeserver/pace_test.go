package fakeserver

import (
	"errors"
	"testing"
)

// wait is a Pacer's wait with nothing to give up on.
func wait(ready <-chan struct{}) error {
	<-ready
	return nil
}

func TestGateHoldsUntilResumed(t *testing.T) {
	var g Gate
	if g.Held() != nil {
		t.Fatal("a new gate is held")
	}
	resume := g.Hold()
	held := g.Held()
	if held == nil {
		t.Fatal("not held after Hold")
	}
	resume()
	resume() // a second call does nothing
	<-held
	if g.Held() != nil {
		t.Fatal("still held after resume")
	}
}

func TestPacerHoldsTheFirstTokenAtTheGate(t *testing.T) {
	var g Gate
	resume := g.Hold()
	emitted := make(chan int, 3)
	done := make(chan error, 1)
	go func() {
		done <- Pacer{Tokens: 3, Gate: &g}.Run(wait, func(i int) error {
			emitted <- i
			return nil
		})
	}()
	if i := <-emitted; i != 0 {
		t.Fatalf("first token %d, want 0", i)
	}
	select {
	case i := <-emitted:
		t.Fatalf("token %d emitted while the gate holds", i)
	case err := <-done:
		t.Fatalf("ended while the gate holds: %v", err)
	default:
	}
	resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(emitted) != 2 {
		t.Fatalf("%d tokens after the gate, want 2", len(emitted))
	}
}

func TestPacerEndsWithWhyItStopped(t *testing.T) {
	stopped := errors.New("client gone")
	var g Gate
	g.Hold()
	n := 0
	err := Pacer{Tokens: 3, Gate: &g}.Run(func(<-chan struct{}) error { return stopped }, func(int) error {
		n++
		return nil
	})
	if !errors.Is(err, stopped) || n != 1 {
		t.Fatalf("Run = %v after %d tokens, want %v after 1", err, n, stopped)
	}
	cut := errors.New("cut")
	if err := (Pacer{Tokens: 3}).Run(wait, func(int) error { return cut }); !errors.Is(err, cut) {
		t.Fatalf("Run = %v, want emit's %v", err, cut)
	}
}

func TestDefault(t *testing.T) {
	a, b := 0, 7
	Default(&a, 5)
	Default(&b, 5)
	if a != 5 || b != 7 {
		t.Fatalf("Default gave %d and %d, want 5 and 7", a, b)
	}
}
