package lock

import (
	"context"
	"runtime"
	"sync"
	"testing"
)

type nopEffects struct{}

func (nopEffects) Free()                     {}
func (nopEffects) Transition(from, to State) {}

func TestSharedPathDoesNotAllocate(t *testing.T) {
	l := New(nopEffects{}, Options{})
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		l.TryAcquireShared()
		l.ReleaseShared()
	}); n != 0 {
		t.Fatalf("TryAcquireShared+ReleaseShared: %v allocations", n)
	}
	if n := testing.AllocsPerRun(1000, func() {
		l.AcquireShared(ctx)
		l.ReleaseShared()
	}); n != 0 {
		t.Fatalf("uncontended AcquireShared+ReleaseShared: %v allocations", n)
	}
}

// BenchmarkSharedUncontended is one LLM request's lock cost when the GPU
// is free: acquire and release, one goroutine.
func BenchmarkSharedUncontended(b *testing.B) {
	l := New(nopEffects{}, Options{})
	b.ReportAllocs()
	for b.Loop() {
		l.TryAcquireShared()
		l.ReleaseShared()
	}
}

// BenchmarkSharedUncontendedHeld is the same with other holders present,
// so no idle<->llm transition happens (the common case under load).
func BenchmarkSharedUncontendedHeld(b *testing.B) {
	l := New(nopEffects{}, Options{})
	l.TryAcquireShared()
	b.ReportAllocs()
	for b.Loop() {
		l.TryAcquireShared()
		l.ReleaseShared()
	}
}

// BenchmarkShared64 is 64 concurrent holders taking and giving back the
// lock: throughput must not collapse.
func BenchmarkShared64(b *testing.B) {
	l := New(nopEffects{}, Options{})
	b.ReportAllocs()
	b.SetParallelism(32) // x GOMAXPROCS goroutines: 64 on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.TryAcquireShared()
			l.ReleaseShared()
		}
	})
}

// BenchmarkExclusiveHandOver is one image job handing the GPU to the next.
func BenchmarkExclusiveHandOver(b *testing.B) {
	l := New(nopEffects{}, Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l.AcquireExclusive(ctx, ImageJob)
		l.ReleaseExclusive(false)
	}
}

// BenchmarkWake10000 is the lock's part of releasing 10,000 waiting LLM
// requests at once: from the exclusive release to the last one holding.
func BenchmarkWake10000(b *testing.B) {
	const n = 10000
	b.StopTimer()
	for range b.N {
		l := New(nopEffects{}, Options{})
		ctx := context.Background()
		l.AcquireExclusive(ctx, ImageJob)
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.AcquireShared(ctx)
			}()
		}
		for l.Snapshot().SharedWaiting < n {
			runtime.Gosched()
		}
		b.StartTimer()
		l.ReleaseExclusive(false)
		wg.Wait()
		b.StopTimer()
	}
}
