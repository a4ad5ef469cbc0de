package lock

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// observing is an Effects that also records every change it is told of,
// as the snapshot's state, holders, waiters and free.
type observing struct {
	recorder
	mu      sync.Mutex
	changes []string
}

func (o *observing) Changed(snap func() Snapshot) {
	s := snap()
	o.mu.Lock()
	o.changes = append(o.changes, fmt.Sprintf("%v shared=%d waitS=%d waitI=%d waitH=%d freeing=%v owes=%v",
		s.State, s.Shared, s.SharedWaiting, s.ImageWaiting, s.HoldWaiting, s.Freeing, s.OwesFree))
	o.mu.Unlock()
}

func (o *observing) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.changes...)
}

// TestObserverSeesEveryChange runs an LLM request, an image job queued
// behind it and an LLM request queued behind that, and checks the
// observer saw each step, in order, including the free and the brief
// shared use that the job's end leads to.
func TestObserverSeesEveryChange(t *testing.T) {
	o := &observing{}
	l := New(o, Options{})
	if !l.TryAcquireShared() {
		t.Fatal("shared not granted on an idle lock")
	}
	image := make(chan error, 1)
	go func() { image <- l.AcquireExclusive(context.Background(), ImageJob) }()
	waitFor(t, l, "the image waiter", func(s Snapshot) bool { return s.ImageWaiting == 1 })
	llm := make(chan error, 1)
	go func() { llm <- l.AcquireShared(context.Background()) }()
	waitFor(t, l, "the shared waiter", func(s Snapshot) bool { return s.SharedWaiting == 1 })
	l.ReleaseShared()
	if err := <-image; err != nil {
		t.Fatal(err)
	}
	l.ReleaseExclusive(true)
	if err := <-llm; err != nil {
		t.Fatal(err)
	}
	l.ReleaseShared()
	l.TryAcquireShared() // granted: one more change
	l.ReleaseShared()
	l.TryAcquireExclusive(ImageJob)
	l.Paid()
	l.ReleaseExclusive(false)

	want := []string{
		"llm shared=1 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
		"llm shared=1 waitS=0 waitI=1 waitH=0 freeing=false owes=false",
		"llm shared=1 waitS=1 waitI=1 waitH=0 freeing=false owes=false",
		"image shared=0 waitS=1 waitI=0 waitH=0 freeing=false owes=false",
		"image shared=0 waitS=1 waitI=0 waitH=0 freeing=true owes=true",
		"llm shared=1 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
		"idle shared=0 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
		"llm shared=1 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
		"idle shared=0 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
		"image shared=0 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
		"image shared=0 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
		"idle shared=0 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
	}
	got := o.seen()
	if len(got) != len(want) {
		t.Fatalf("observer saw %d changes, want %d:\n%s", len(got), len(want), join(got))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("change %d: got %q, want %q", i, got[i], want[i])
		}
	}
}

// TestObserverSeesCancelledWaiters checks that a waiter whose context
// ends is seen leaving the queue.
func TestObserverSeesCancelledWaiters(t *testing.T) {
	o := &observing{}
	l := New(o, Options{})
	l.TryAcquireExclusive(ExternalHold)
	for _, kind := range []Kind{sharedHold, ImageJob} {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		if kind == sharedHold {
			go func() { done <- l.AcquireShared(ctx) }()
		} else {
			go func() { done <- l.AcquireExclusive(ctx, kind) }()
		}
		waitFor(t, l, "the waiter", func(s Snapshot) bool { return s.SharedWaiting+s.ImageWaiting == 1 })
		cancel()
		<-done
	}
	got := o.seen()
	want := []string{
		"hold shared=0 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
		"hold shared=0 waitS=1 waitI=0 waitH=0 freeing=false owes=false",
		"hold shared=0 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
		"hold shared=0 waitS=0 waitI=1 waitH=0 freeing=false owes=false",
		"hold shared=0 waitS=0 waitI=0 waitH=0 freeing=false owes=false",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("observer saw:\n%s\nwant:\n%s", join(got), join(want))
	}
	l.ReleaseExclusive(false)
}

func join(s []string) string {
	out := ""
	for _, x := range s {
		out += "  " + x + "\n"
	}
	return out
}
