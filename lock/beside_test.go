package lock

import (
	"context"
	"slices"
	"testing"
)

var yes = func() bool { return true }

// Holders beside an image job: only while an image job holds the lock,
// only when the caller's check says so, never while a hold waits or a
// free runs; the state stays image while they run beside it.
func TestBesideOnlyBesideAnImageJob(t *testing.T) {
	r := &recorder{}
	l := New(r, Options{})
	if l.TryAcquireBeside(yes) {
		t.Fatal("admitted beside an idle lock")
	}
	if err := l.AcquireExclusive(context.Background(), ExternalHold); err != nil {
		t.Fatal(err)
	}
	if l.TryAcquireBeside(yes) {
		t.Fatal("admitted beside a hold")
	}
	l.ReleaseExclusive(false)

	if err := l.AcquireExclusive(context.Background(), ImageJob); err != nil {
		t.Fatal(err)
	}
	called := false
	if l.TryAcquireBeside(func() bool { called = true; return false }) || !called {
		t.Fatal("admitted beside an image job though the check said no")
	}
	if l.TryAcquireShared() {
		t.Fatal("an ordinary shared holder admitted beside an image job")
	}
	if !l.TryAcquireBeside(yes) {
		t.Fatal("not admitted beside an image job")
	}
	if s := l.Snapshot(); s.State != Image || s.Shared != 1 || s.Beside != 1 {
		t.Fatalf("snapshot %+v, want image with one holder beside", s)
	}
	l.ReleaseShared()
	if s := l.Snapshot(); s.State != Image || s.Shared != 0 || s.Beside != 0 {
		t.Fatalf("snapshot %+v, want image alone", s)
	}

	hold := queue(t, l, ExternalHold, 1)
	if l.TryAcquireBeside(yes) {
		t.Fatal("admitted beside an image job while a hold waits")
	}
	l.ReleaseExclusive(true)
	if err := <-hold; err != nil {
		t.Fatal(err)
	}
	l.ReleaseExclusive(false)
	if got, want := r.transitions(), []string{"idle>hold", "hold>idle", "idle>image", "image>hold", "hold>idle"}; !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

// No holder is admitted beside a job while its free runs.
func TestBesideNotWhileFreeing(t *testing.T) {
	r := &recorder{}
	l := New(r, Options{})
	if err := l.AcquireExclusive(context.Background(), ImageJob); err != nil {
		t.Fatal(err)
	}
	r.onFree = func() {
		if l.TryAcquireBeside(yes) {
			t.Error("admitted beside a job whose free runs")
		}
	}
	l.ReleaseExclusive(true)
	if r.frees.Load() != 1 {
		t.Fatal("no free")
	}
}

// When the job ends with holders beside it, its debt is paid (they never
// meet the next job's engines' models), they go on as ordinary shared
// holders (state llm), and the next exclusive waiter gets the lock only
// once they have left.
func TestBesideOutlivesTheJob(t *testing.T) {
	r := &recorder{}
	l := New(r, Options{})
	if err := l.AcquireExclusive(context.Background(), ImageJob); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if !l.TryAcquireBeside(yes) {
			t.Fatal("not admitted beside")
		}
	}
	next := queue(t, l, ImageJob, 1)
	if handed := l.ReleaseExclusive(true); handed {
		t.Fatal("handed over to the next job with holders beside the last")
	}
	if r.frees.Load() != 1 {
		t.Fatal("the job's debt was not paid before the lock left it")
	}
	if s := l.Snapshot(); s.State != LLM || s.Shared != 2 || s.Beside != 0 || s.ImageWaiting != 1 {
		t.Fatalf("snapshot %+v, want llm with two holders and the job waiting", s)
	}
	if l.TryAcquireShared() {
		t.Fatal("a new shared holder went ahead of the waiting job")
	}
	l.ReleaseShared()
	select {
	case <-next:
		t.Fatal("the next job granted with a holder still in flight")
	default:
	}
	l.ReleaseShared()
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.State != Image || s.Shared != 0 {
		t.Fatalf("snapshot %+v, want the next job alone", s)
	}
	l.ReleaseExclusive(true)
	if got, want := r.transitions(), []string{"idle>image", "image>llm", "llm>image", "image>idle"}; !slices.Equal(got, want) {
		t.Fatalf("transitions %v, want %v", got, want)
	}
}

// Shared waiters queued during the job are admitted at its end beside the
// holders that outlive it, as they would be without them.
func TestBesideAndSharedWaitersAtTheEnd(t *testing.T) {
	l := New(&recorder{}, Options{})
	if err := l.AcquireExclusive(context.Background(), ImageJob); err != nil {
		t.Fatal(err)
	}
	if !l.TryAcquireBeside(yes) {
		t.Fatal("not admitted beside")
	}
	waiter := queue(t, l, sharedHold, 1)
	l.ReleaseExclusive(false)
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.State != LLM || s.Shared != 2 {
		t.Fatalf("snapshot %+v, want llm with both", s)
	}
	l.ReleaseShared()
	l.ReleaseShared()
	if s := l.Snapshot(); s.State != Idle {
		t.Fatalf("snapshot %+v, want idle", s)
	}
}
