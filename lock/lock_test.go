package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is an Effects that records transitions and frees.
type recorder struct {
	mu    sync.Mutex
	trans []string
	frees atomic.Int32
	// onFree runs inside Free, e.g. to let a test act while a free runs.
	onFree func()
}

func (r *recorder) Free() {
	r.frees.Add(1)
	if r.onFree != nil {
		r.onFree()
	}
}

func (r *recorder) Transition(from, to State) {
	r.mu.Lock()
	r.trans = append(r.trans, from.String()+">"+to.String())
	r.mu.Unlock()
}

func (r *recorder) transitions() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.trans...)
}

// waitFor polls the lock's snapshot until cond holds; a queued waiter is
// only visible there, so this is how tests know a goroutine is waiting.
func waitFor(t *testing.T, l *Lock, what string, cond func(Snapshot) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond(l.Snapshot()) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; snapshot %+v", what, l.Snapshot())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// sharedHold stands for a shared holder where tests list kinds of holders.
const sharedHold = Kind(LLM)

func acquireAsync(l *Lock, ctx context.Context, kind Kind) <-chan error {
	done := make(chan error, 1)
	go func() {
		if kind == sharedHold {
			done <- l.AcquireShared(ctx)
		} else {
			done <- l.AcquireExclusive(ctx, kind)
		}
	}()
	return done
}

// queue starts an acquire of kind in the background and returns once the
// lock counts n waiters of that kind (external holds: n holds of either
// kind), which is how a test knows the acquire is queued.
func queue(t *testing.T, l *Lock, kind Kind, n int) <-chan error {
	t.Helper()
	ch := acquireAsync(l, context.Background(), kind)
	waitFor(t, l, fmt.Sprintf("%d waiters of kind %d", n, kind), func(s Snapshot) bool {
		switch kind {
		case sharedHold:
			return s.SharedWaiting == n
		case ImageJob:
			return s.ImageWaiting == n
		case PresenceHold:
			return s.PresenceWaiting == n
		}
		return s.HoldWaiting == n
	})
	return ch
}

func mustNotBeDone(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s finished early (err %v)", what, err)
	default:
	}
}

func TestTransitions(t *testing.T) {
	bg := context.Background()
	cases := []struct {
		name  string
		steps func(l *Lock)
		want  []string
		frees int32
	}{
		{"shared in and out", func(l *Lock) {
			l.AcquireShared(bg)
			l.AcquireShared(bg)
			l.ReleaseShared()
			l.ReleaseShared()
		}, []string{"idle>llm", "llm>idle"}, 0},
		{"image without job owes nothing", func(l *Lock) {
			l.AcquireExclusive(bg, ImageJob)
			l.ReleaseExclusive(false)
		}, []string{"idle>image", "image>idle"}, 0},
		{"image with job frees", func(l *Lock) {
			l.AcquireExclusive(bg, ImageJob)
			l.ReleaseExclusive(true)
		}, []string{"idle>image", "image>idle"}, 1},
		{"hold", func(l *Lock) {
			l.AcquireExclusive(bg, ExternalHold)
			l.ReleaseExclusive(false)
		}, []string{"idle>hold", "hold>idle"}, 0},
		{"presence", func(l *Lock) {
			l.AcquireExclusive(bg, PresenceHold)
			l.ReleaseExclusive(false)
		}, []string{"idle>hold", "hold>idle"}, 0},
		{"hold pays debt itself", func(l *Lock) {
			l.AcquireExclusive(bg, ImageJob)
			l.ReleaseExclusive(true) // pays
			l.AcquireExclusive(bg, ExternalHold)
			l.Paid()
			l.ReleaseExclusive(false)
		}, []string{"idle>image", "image>idle", "idle>hold", "hold>idle"}, 1},
		{"try shared", func(l *Lock) {
			if !l.TryAcquireShared() {
				panic("try failed on idle lock")
			}
			l.ReleaseShared()
		}, []string{"idle>llm", "llm>idle"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			l := New(r, Options{})
			tc.steps(l)
			if got := r.transitions(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("transitions %v, want %v", got, tc.want)
			}
			if got := r.frees.Load(); got != tc.frees {
				t.Errorf("frees %d, want %d", got, tc.frees)
			}
			if s := l.Snapshot(); s != (Snapshot{}) {
				t.Errorf("lock not idle and empty at end: %+v", s)
			}
		})
	}
}

func TestTryAcquireSharedRefusesWhileExclusiveWaits(t *testing.T) {
	l := New(&recorder{}, Options{})
	l.AcquireShared(context.Background())
	img := acquireAsync(l, context.Background(), ImageJob)
	waitFor(t, l, "image waiter", func(s Snapshot) bool { return s.ImageWaiting == 1 })
	if !l.Snapshot().SharedWaits || l.TryAcquireShared() {
		t.Fatal("TryAcquireShared succeeded (or the snapshot said it would) while an exclusive waiter was queued")
	}
	l.ReleaseShared()
	if err := <-img; err != nil {
		t.Fatal(err)
	}
	if !l.Snapshot().SharedWaits || l.TryAcquireShared() {
		t.Fatal("TryAcquireShared succeeded (or the snapshot said it would) while exclusive was held")
	}
	l.ReleaseExclusive(false)
	if l.Snapshot().SharedWaits || !l.TryAcquireShared() {
		t.Fatal("TryAcquireShared failed (or the snapshot said it would) on an idle lock")
	}
	if l.Snapshot().SharedWaits {
		t.Fatal("the snapshot says a shared holder waits beside another")
	}
	l.ReleaseShared()
}

func TestImageWaitsForLLMToDrain(t *testing.T) {
	r := &recorder{}
	l := New(r, Options{})
	bg := context.Background()
	l.AcquireShared(bg)
	l.AcquireShared(bg)
	img := queue(t, l, ImageJob, 1)

	// Writer preference: a new LLM request waits behind the image waiter.
	llm := queue(t, l, sharedHold, 1)

	l.ReleaseShared()
	mustNotBeDone(t, img, "image acquire with one LLM holder left")
	l.ReleaseShared()
	if err := <-img; err != nil {
		t.Fatal(err)
	}
	mustNotBeDone(t, llm, "llm acquire during image")
	if s := l.State(); s != Image {
		t.Fatalf("state %v, want image", s)
	}
	l.ReleaseExclusive(true)
	if err := <-llm; err != nil {
		t.Fatal(err)
	}
	if got := r.frees.Load(); got != 1 {
		t.Fatalf("frees %d, want 1 before LLM got the GPU", got)
	}
	l.ReleaseShared()
	want := "[idle>llm llm>image image>llm llm>idle]"
	if got := fmt.Sprint(r.transitions()); got != want {
		t.Fatalf("transitions %s, want %s", got, want)
	}
}

func TestExclusiveWaitersAreFIFO(t *testing.T) {
	l := New(&recorder{}, Options{})
	bg := context.Background()
	l.AcquireShared(bg)
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 5 {
		// Queue each only after the previous is visible, so arrival order is known.
		wg.Add(1)
		kind := ImageJob
		if i%2 == 1 {
			kind = ExternalHold
		}
		go func() {
			defer wg.Done()
			if err := l.AcquireExclusive(bg, kind); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			l.ReleaseExclusive(false)
		}()
		waitFor(t, l, "queued", func(s Snapshot) bool { return s.ImageWaiting+s.HoldWaiting == i+1 })
	}
	l.ReleaseShared()
	wg.Wait()
	if fmt.Sprint(order) != "[0 1 2 3 4]" {
		t.Fatalf("served in order %v, want arrival order", order)
	}
}

func TestHandOverCarriesTheDebt(t *testing.T) {
	r := &recorder{}
	l := New(r, Options{})
	bg := context.Background()
	l.AcquireExclusive(bg, ImageJob)
	next := queue(t, l, ImageJob, 1)
	if !l.ReleaseExclusive(true) {
		t.Fatal("release did not hand over to the waiting image")
	}
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	if r.frees.Load() != 0 {
		t.Fatal("freed between consecutive image jobs")
	}
	if !l.OwesFree() {
		t.Fatal("debt lost on hand-over")
	}
	// The second request fails (400): it ran no job, but the first one's
	// models are still there, so the free is still owed.
	if l.ReleaseExclusive(false) {
		t.Fatal("handed over with nobody waiting")
	}
	if r.frees.Load() != 1 {
		t.Fatal("free skipped after a failed hand-over")
	}
}

func TestCancelledWaiterLeavesAtOnce(t *testing.T) {
	for _, kind := range []Kind{sharedHold, ImageJob, ExternalHold, PresenceHold} {
		t.Run(kind.String(), func(t *testing.T) {
			l := New(&recorder{}, Options{})
			bg := context.Background()
			l.AcquireExclusive(bg, ImageJob)
			ctx, cancel := context.WithCancel(bg)
			ch := acquireAsync(l, ctx, kind)
			waitFor(t, l, "waiter", func(s Snapshot) bool {
				return s.SharedWaiting+s.ImageWaiting+s.HoldWaiting == 1
			})
			cancel()
			if err := <-ch; !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v, want canceled", err)
			}
			if s := l.Snapshot(); s.SharedWaiting+s.ImageWaiting+s.HoldWaiting != 0 {
				t.Fatalf("cancelled waiter still counted: %+v", s)
			}
			l.ReleaseExclusive(false)
			if s := l.Snapshot(); s != (Snapshot{}) {
				t.Fatalf("not idle after release: %+v", s)
			}
		})
	}
}

func TestCancelledImageWaiterUnblocksLLM(t *testing.T) {
	l := New(&recorder{}, Options{})
	bg := context.Background()
	l.AcquireShared(bg)
	ctx, cancel := context.WithCancel(bg)
	img := acquireAsync(l, ctx, ImageJob)
	waitFor(t, l, "image waiter", func(s Snapshot) bool { return s.ImageWaiting == 1 })
	llm := queue(t, l, sharedHold, 1)
	cancel()
	<-img
	if err := <-llm; err != nil {
		t.Fatalf("LLM waiter not admitted after the image waiter left: %v", err)
	}
	if s := l.Snapshot(); s.Shared != 2 || s.State != LLM {
		t.Fatalf("snapshot %+v, want 2 shared holders", s)
	}
	l.ReleaseShared()
	l.ReleaseShared()
}

// A waiter whose context ends just as it is granted must not leak the hold,
// and an exclusive one must still pay the debt it inherited.
func TestCancelRacingGrant(t *testing.T) {
	for i := range 300 {
		r := &recorder{}
		l := New(r, Options{})
		bg := context.Background()
		l.AcquireExclusive(bg, ImageJob)
		ctx, cancel := context.WithCancel(bg)
		kind := []Kind{sharedHold, ImageJob, ExternalHold, PresenceHold}[i%4]
		ch := acquireAsync(l, ctx, kind)
		waitFor(t, l, "waiter", func(s Snapshot) bool {
			return s.SharedWaiting+s.ImageWaiting+s.HoldWaiting == 1
		})
		go cancel()
		l.ReleaseExclusive(true)
		if err := <-ch; err == nil {
			if kind == sharedHold {
				l.ReleaseShared()
			} else {
				l.ReleaseExclusive(false)
			}
		}
		if s := l.Snapshot(); s != (Snapshot{}) {
			t.Fatalf("iteration %d (%v): lock not idle: %+v", i, kind, s)
		}
		if r.frees.Load() != 1 {
			t.Fatalf("iteration %d (%v): frees %d, want exactly 1", i, kind, r.frees.Load())
		}
	}
}

func TestWaiterArrivingDuringFreeIsServedAfterIt(t *testing.T) {
	r := &recorder{}
	l := New(r, Options{})
	bg := context.Background()
	inFree := make(chan struct{})
	proceed := make(chan struct{})
	r.onFree = func() { close(inFree); <-proceed }
	l.AcquireExclusive(bg, ImageJob)
	released := make(chan bool)
	go func() { released <- l.ReleaseExclusive(true) }()
	<-inFree
	if !l.Snapshot().SharedWaits || l.TryAcquireShared() {
		t.Fatal("shared admitted (or the snapshot said it would be) during a free")
	}
	if s := l.State(); s != Image {
		t.Fatalf("state during free %v, want image", s)
	}
	hold := queue(t, l, ExternalHold, 1)
	close(proceed)
	if !<-released {
		t.Fatal("the hold that arrived during the free was not handed the lock")
	}
	if err := <-hold; err != nil {
		t.Fatal(err)
	}
	if l.OwesFree() {
		t.Fatal("debt still owed after the free ran")
	}
	l.ReleaseExclusive(false)
	if r.frees.Load() != 1 {
		t.Fatalf("frees %d, want 1", r.frees.Load())
	}
}

func TestMaxExclusiveStreakGivesLLMATurn(t *testing.T) {
	l := New(&recorder{}, Options{MaxExclusiveStreak: 2})
	bg := context.Background()
	l.AcquireExclusive(bg, ImageJob) // a job runs
	llm := queue(t, l, sharedHold, 1)
	imgs := make([]<-chan error, 3)
	for i := range imgs {
		imgs[i] = acquireAsync(l, bg, ImageJob)
		waitFor(t, l, "image waiters", func(s Snapshot) bool { return s.ImageWaiting == i+1 })
	}
	// The first job was granted with no LLM waiting; the next two make the
	// streak, and then the LLM request gets its turn.
	l.ReleaseExclusive(true)
	<-imgs[0]
	l.ReleaseExclusive(true)
	<-imgs[1]
	mustNotBeDone(t, llm, "llm before the streak bound")
	if l.ReleaseExclusive(true) {
		t.Fatal("handed over past the streak bound")
	}
	if err := <-llm; err != nil {
		t.Fatal(err)
	}
	// New LLM requests still queue behind the waiting image job.
	if l.TryAcquireShared() {
		t.Fatal("new shared holder admitted while an image waits")
	}
	l.ReleaseShared()
	if err := <-imgs[2]; err != nil {
		t.Fatal(err)
	}
	l.ReleaseExclusive(false)
}

func TestStrictPriorityByDefault(t *testing.T) {
	l := New(&recorder{}, Options{})
	bg := context.Background()
	l.AcquireExclusive(bg, ImageJob)
	llm := queue(t, l, sharedHold, 1)
	for i := range 5 {
		img := queue(t, l, ImageJob, 1)
		if !l.ReleaseExclusive(true) {
			t.Fatalf("job %d: not handed over to the next image", i)
		}
		<-img
	}
	mustNotBeDone(t, llm, "llm under strict priority")
	l.ReleaseExclusive(true)
	<-llm
	l.ReleaseShared()
}

func TestPresenceKind(t *testing.T) {
	for kind, want := range map[Kind]string{ImageJob: "image image", ExternalHold: "hold hold", PresenceHold: "presence hold"} {
		if got := kind.String() + " " + kind.State().String(); got != want {
			t.Errorf("kind and state %q, want %q", got, want)
		}
	}
}

// A presence hold queued behind a running image job, after two image jobs
// were queued, is granted as soon as the running job releases; the image
// jobs follow in their order.
func TestPresenceHoldGoesFirst(t *testing.T) {
	r := &recorder{}
	l := New(r, Options{})
	bg := context.Background()
	l.AcquireExclusive(bg, ImageJob) // the running job
	img1 := queue(t, l, ImageJob, 1)
	img2 := queue(t, l, ImageJob, 2)
	pres := queue(t, l, PresenceHold, 1)
	if s := l.Snapshot(); s.State != Image || s.HoldWaiting != 1 {
		t.Fatalf("snapshot %+v: want the job still running, the presence hold among the hold waiters", s)
	}

	if !l.ReleaseExclusive(true) {
		t.Fatal("the running job's release did not hand over")
	}
	if s := l.Snapshot(); s.State != Hold || s.ImageWaiting != 2 || s.HoldWaiting != 0 || s.PresenceWaiting != 0 {
		t.Fatalf("after the job: snapshot %+v, want the presence hold granted, both image jobs queued", s)
	}
	if err := <-pres; err != nil {
		t.Fatal(err)
	}
	mustNotBeDone(t, img1, "first image job during the presence hold")
	mustNotBeDone(t, img2, "second image job during the presence hold")
	l.Paid() // a hold frees the image engines on entry

	if !l.ReleaseExclusive(false) {
		t.Fatal("the presence hold's release did not hand over")
	}
	if err := <-img1; err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.ImageWaiting != 1 {
		t.Fatalf("snapshot %+v, want the second image job still queued", s)
	}
	if !l.ReleaseExclusive(true) {
		t.Fatal("the first image job's release did not hand over")
	}
	if err := <-img2; err != nil {
		t.Fatal(err)
	}
	if l.ReleaseExclusive(true) {
		t.Fatal("handed over with nobody waiting")
	}
	want := "[idle>image image>hold hold>image image>idle]"
	if got := fmt.Sprint(r.transitions()); got != want {
		t.Fatalf("transitions %s, want %s", got, want)
	}
	if got := r.frees.Load(); got != 1 {
		t.Fatalf("frees %d, want 1 (the hold paid the first job's debt)", got)
	}
}

func TestPresenceHoldsQueueFirstInArrivalOrder(t *testing.T) {
	l := New(&recorder{}, Options{})
	bg := context.Background()
	l.AcquireExclusive(bg, ImageJob)
	arrivals := []struct {
		name string
		kind Kind
	}{
		{"image A", ImageJob}, {"hold B", ExternalHold}, {"presence 1", PresenceHold},
		{"image C", ImageJob}, {"presence 2", PresenceHold}, {"hold D", ExternalHold},
		{"presence 3", PresenceHold},
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, a := range arrivals {
		wg.Go(func() {
			if err := l.AcquireExclusive(bg, a.kind); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, a.name)
			mu.Unlock()
			l.ReleaseExclusive(false)
		})
		// Queue each only after the previous is visible, so arrival order is known.
		waitFor(t, l, a.name+" queued", func(s Snapshot) bool { return s.ImageWaiting+s.HoldWaiting == i+1 })
	}
	if s := l.Snapshot(); s.ImageWaiting != 2 || s.HoldWaiting != 5 || s.PresenceWaiting != 3 {
		t.Fatalf("snapshot %+v, want 2 image, 5 hold waiters, 3 of them presence", s)
	}
	l.ReleaseExclusive(false)
	wg.Wait()
	want := "[presence 1 presence 2 presence 3 image A hold B image C hold D]"
	if got := fmt.Sprint(order); got != want {
		t.Fatalf("served in order %s, want %s", got, want)
	}
}

func TestCancelledPresenceHoldLeavesTheQueue(t *testing.T) {
	bg := context.Background()
	t.Run("among waiters", func(t *testing.T) {
		l := New(&recorder{}, Options{})
		l.AcquireExclusive(bg, ImageJob)
		img := queue(t, l, ImageJob, 1)
		ctx, cancel := context.WithCancel(bg)
		pres1 := acquireAsync(l, ctx, PresenceHold)
		waitFor(t, l, "first presence waiter", func(s Snapshot) bool { return s.PresenceWaiting == 1 })
		pres2 := queue(t, l, PresenceHold, 2)

		cancel()
		if err := <-pres1; !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want canceled", err)
		}
		if s := l.Snapshot(); s.PresenceWaiting != 1 || s.HoldWaiting != 1 || s.ImageWaiting != 1 {
			t.Fatalf("snapshot %+v, want one presence and one image waiter left", s)
		}
		if !l.ReleaseExclusive(false) {
			t.Fatal("release did not hand over")
		}
		if err := <-pres2; err != nil {
			t.Fatal(err)
		}
		mustNotBeDone(t, img, "image job during the presence hold")
		if !l.ReleaseExclusive(false) {
			t.Fatal("the presence hold's release did not hand over")
		}
		if err := <-img; err != nil {
			t.Fatal(err)
		}
		l.ReleaseExclusive(false)
		if s := l.Snapshot(); s != (Snapshot{}) {
			t.Fatalf("not idle after release: %+v", s)
		}
	})
	t.Run("alone ahead of shared waiters", func(t *testing.T) {
		l := New(&recorder{}, Options{})
		l.AcquireShared(bg)
		ctx, cancel := context.WithCancel(bg)
		pres := acquireAsync(l, ctx, PresenceHold)
		waitFor(t, l, "presence waiter", func(s Snapshot) bool { return s.PresenceWaiting == 1 })
		if l.TryAcquireShared() {
			t.Fatal("TryAcquireShared succeeded while a presence hold was queued")
		}
		llm := queue(t, l, sharedHold, 1)
		cancel()
		<-pres
		if err := <-llm; err != nil {
			t.Fatalf("LLM waiter not admitted after the presence hold left: %v", err)
		}
		if s := l.Snapshot(); s.Shared != 2 || s.State != LLM || s.HoldWaiting != 0 || s.PresenceWaiting != 0 {
			t.Fatalf("snapshot %+v, want 2 shared holders and nothing queued", s)
		}
		l.ReleaseShared()
		l.ReleaseShared()
	})
}

// With the streak bound reached, a presence hold still goes before the
// waiting shared holders; their turn comes at the presence hold's release,
// ahead of the image job queued behind it.
func TestPresenceHoldGoesFirstPastTheStreakBound(t *testing.T) {
	l := New(&recorder{}, Options{MaxExclusiveStreak: 1})
	bg := context.Background()
	l.AcquireExclusive(bg, ImageJob) // granted with nobody waiting: no streak
	llm := queue(t, l, sharedHold, 1)
	img1 := queue(t, l, ImageJob, 1)
	if !l.ReleaseExclusive(true) {
		t.Fatal("not handed over within the streak bound")
	}
	if err := <-img1; err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.Streak != 1 {
		t.Fatalf("streak %d, want 1: the bound is reached", s.Streak)
	}
	pres := queue(t, l, PresenceHold, 1)
	img2 := queue(t, l, ImageJob, 1)

	if !l.ReleaseExclusive(true) {
		t.Fatal("the presence hold waited for the shared turn")
	}
	if err := <-pres; err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.State != Hold || s.SharedWaiting != 1 || s.ImageWaiting != 1 || s.Streak != 2 || !s.OwesFree {
		t.Fatalf("snapshot %+v, want the presence hold counted in the streak, the others waiting", s)
	}
	mustNotBeDone(t, llm, "llm during the presence hold")

	if l.ReleaseExclusive(false) {
		t.Fatal("handed over to the image job past the streak bound")
	}
	if err := <-llm; err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.State != LLM || s.Streak != 0 || s.OwesFree {
		t.Fatalf("snapshot %+v, want the shared turn after the free, the streak reset", s)
	}
	if l.TryAcquireShared() {
		t.Fatal("new shared holder admitted while an image job waits")
	}
	l.ReleaseShared()
	if err := <-img2; err != nil {
		t.Fatal(err)
	}
	l.ReleaseExclusive(false)
}

// A presence grant counts in the streak like any other, so the image jobs
// behind it get fewer grants before the shared turn.
func TestPresenceGrantCountsInTheStreak(t *testing.T) {
	l := New(&recorder{}, Options{MaxExclusiveStreak: 2})
	bg := context.Background()
	l.AcquireExclusive(bg, ImageJob)
	llm := queue(t, l, sharedHold, 1)
	img1 := queue(t, l, ImageJob, 1)
	pres := queue(t, l, PresenceHold, 1)
	img2 := queue(t, l, ImageJob, 2)

	if !l.ReleaseExclusive(false) {
		t.Fatal("not handed over to the presence hold")
	}
	if err := <-pres; err != nil {
		t.Fatal(err)
	}
	if !l.ReleaseExclusive(false) {
		t.Fatal("not handed over to the first image job")
	}
	if err := <-img1; err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.Streak != 2 {
		t.Fatalf("streak %d, want 2: the presence hold and the image job", s.Streak)
	}
	if l.ReleaseExclusive(false) {
		t.Fatal("handed over to the second image job past the streak bound")
	}
	if err := <-llm; err != nil {
		t.Fatal(err)
	}
	mustNotBeDone(t, img2, "second image job during the shared turn")
	l.ReleaseShared()
	if err := <-img2; err != nil {
		t.Fatal(err)
	}
	l.ReleaseExclusive(false)
}

// The debt passes to a presence hold like to any exclusive holder: no free
// between the image job and the hold, which settles it by freeing the
// image engines itself, or else has it freed at its release before the
// shared turn.
func TestHandOverToPresenceHoldCarriesTheDebt(t *testing.T) {
	for _, paid := range []bool{true, false} {
		t.Run(fmt.Sprintf("paid=%v", paid), func(t *testing.T) {
			r := &recorder{}
			l := New(r, Options{})
			bg := context.Background()
			l.AcquireExclusive(bg, ImageJob)
			llm := queue(t, l, sharedHold, 1)
			pres := queue(t, l, PresenceHold, 1)
			if !l.ReleaseExclusive(true) {
				t.Fatal("the image job's release did not hand over to the presence hold")
			}
			if err := <-pres; err != nil {
				t.Fatal(err)
			}
			if r.frees.Load() != 0 || !l.OwesFree() {
				t.Fatalf("frees %d, owes %v: want the debt handed over unpaid", r.frees.Load(), l.OwesFree())
			}
			if paid {
				l.Paid()
			}
			if l.ReleaseExclusive(false) {
				t.Fatal("handed over with no exclusive waiter")
			}
			if err := <-llm; err != nil {
				t.Fatal(err)
			}
			want := int32(1)
			if paid {
				want = 0
			}
			if got := r.frees.Load(); got != want {
				t.Fatalf("frees %d, want %d", got, want)
			}
			if l.OwesFree() {
				t.Fatal("debt still owed after the shared turn began")
			}
			l.ReleaseShared()
		})
	}
}

// A presence hold that arrives while a free runs, after an image job, is
// served first once the free is done.
func TestPresenceArrivingDuringFreeGoesFirst(t *testing.T) {
	r := &recorder{}
	l := New(r, Options{})
	bg := context.Background()
	inFree := make(chan struct{})
	proceed := make(chan struct{})
	r.onFree = func() { close(inFree); <-proceed }
	l.AcquireExclusive(bg, ImageJob)
	released := make(chan bool)
	go func() { released <- l.ReleaseExclusive(true) }()
	<-inFree
	img := queue(t, l, ImageJob, 1)
	pres := queue(t, l, PresenceHold, 1)
	close(proceed)
	if !<-released {
		t.Fatal("the lock was not handed over after the free")
	}
	if err := <-pres; err != nil {
		t.Fatal(err)
	}
	if s := l.Snapshot(); s.State != Hold || s.ImageWaiting != 1 || s.OwesFree {
		t.Fatalf("snapshot %+v, want the presence hold holding, the image job queued, nothing owed", s)
	}
	l.ReleaseExclusive(false)
	if err := <-img; err != nil {
		t.Fatal(err)
	}
	l.ReleaseExclusive(false)
	if r.frees.Load() != 1 {
		t.Fatalf("frees %d, want 1", r.frees.Load())
	}
}

func TestMisuse(t *testing.T) {
	for name, f := range map[string]func(l *Lock){
		"release shared unheld":    func(l *Lock) { l.ReleaseShared() },
		"release exclusive unheld": func(l *Lock) { l.ReleaseExclusive(false) },
		// LLM and Idle no longer compile as a Kind; only a conversion
		// gets one in.
		"exclusive kind llm": func(l *Lock) { l.AcquireExclusive(context.Background(), Kind(LLM)) },
		"exclusive kind past presence": func(l *Lock) {
			l.AcquireExclusive(context.Background(), PresenceHold+1)
		},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			f(New(&recorder{}, Options{}))
		})
	}
}

// checker is an Effects that asserts the exclusion invariant from the
// holders' side: it is told of every grant and release by the workers.
type checker struct {
	t      *testing.T
	mu     sync.Mutex
	shared int
	excl   int
	frees  atomic.Int64
}

func (c *checker) Free()                     { c.frees.Add(1) }
func (c *checker) Transition(from, to State) {}

func (c *checker) enter(exclusive bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if exclusive {
		c.excl++
	} else {
		c.shared++
	}
	if c.excl > 1 || (c.excl > 0 && c.shared > 0) {
		c.t.Errorf("exclusion broken: %d exclusive, %d shared", c.excl, c.shared)
	}
}

func (c *checker) leave(exclusive bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if exclusive {
		c.excl--
	} else {
		c.shared--
	}
}

// TestRandomisedExclusion runs many goroutines that take and give back the
// lock in random ways, with random cancellations, and checks exclusion at
// every grant, then that the lock ends idle with nothing queued.
func TestRandomisedExclusion(t *testing.T) {
	for _, streak := range []int{0, 1, 3} {
		seed := uint64(time.Now().UnixNano())
		t.Run(fmt.Sprintf("streak=%d/seed=%d", streak, seed), func(t *testing.T) {
			c := &checker{t: t}
			l := New(c, Options{MaxExclusiveStreak: streak})
			var wg sync.WaitGroup
			var granted, cancelled atomic.Int64
			for w := range 16 {
				rng := rand.New(rand.NewPCG(seed, uint64(w)))
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 300 {
						kind := []Kind{sharedHold, sharedHold, sharedHold, sharedHold, ImageJob, ExternalHold, PresenceHold}[rng.IntN(7)]
						ctx, cancel := context.WithCancel(context.Background())
						if rng.IntN(5) == 0 {
							time.AfterFunc(time.Duration(rng.IntN(50))*time.Microsecond, cancel)
						}
						var err error
						if kind == sharedHold {
							if rng.IntN(4) == 0 {
								if !l.TryAcquireShared() {
									err = context.Canceled
								}
							} else {
								err = l.AcquireShared(ctx)
							}
						} else {
							err = l.AcquireExclusive(ctx, kind)
						}
						cancel()
						if err != nil {
							cancelled.Add(1)
							continue
						}
						granted.Add(1)
						c.enter(kind != sharedHold)
						if rng.IntN(3) == 0 {
							time.Sleep(time.Duration(rng.IntN(20)) * time.Microsecond)
						}
						c.leave(kind != sharedHold)
						if kind == sharedHold {
							l.ReleaseShared()
						} else {
							l.ReleaseExclusive(kind == ImageJob && rng.IntN(2) == 0)
						}
					}
				}()
			}
			wg.Wait()
			if s := l.Snapshot(); s != (Snapshot{}) {
				t.Fatalf("lock not idle at end: %+v", s)
			}
			t.Logf("granted %d, cancelled or refused %d, frees %d", granted.Load(), cancelled.Load(), c.frees.Load())
		})
	}
}

// A context already done takes nothing, even from a free lock: an
// exclusive grant would have Ollama emptied for a client that has gone.
func TestDoneContextTakesNothing(t *testing.T) {
	rec := &recorder{}
	l := New(rec, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, kind := range []Kind{ImageJob, ExternalHold, PresenceHold} {
		if err := l.AcquireExclusive(ctx, kind); err == nil {
			t.Fatalf("%v granted to a done context", kind)
		}
	}
	if err := l.AcquireShared(ctx); err == nil {
		t.Fatal("shared hold granted to a done context")
	}
	if st := l.Snapshot(); st.State != Idle || st.Shared != 0 || len(rec.transitions()) != 0 {
		t.Fatalf("snapshot %+v, transitions %v: want an untouched idle lock", st, rec.transitions())
	}
}

func TestTryAcquireExclusive(t *testing.T) {
	bg := context.Background()
	t.Run("idle", func(t *testing.T) {
		r := &recorder{}
		l := New(r, Options{})
		if !l.TryAcquireExclusive(ExternalHold) {
			t.Fatal("refused on an idle lock")
		}
		if s := l.State(); s != Hold {
			t.Fatalf("state %v, want hold", s)
		}
		if l.TryAcquireExclusive(ImageJob) || l.TryAcquireShared() {
			t.Fatal("a second holder got in")
		}
		if l.ReleaseExclusive(false) {
			t.Fatal("handed over with nobody waiting")
		}
		if got, want := fmt.Sprint(r.transitions()), "[idle>hold hold>idle]"; got != want {
			t.Fatalf("transitions %s, want %s", got, want)
		}
	})
	t.Run("shared holder", func(t *testing.T) {
		l := New(&recorder{}, Options{})
		l.TryAcquireShared()
		if l.TryAcquireExclusive(ExternalHold) {
			t.Fatal("granted while an LLM request is in flight")
		}
		if s := l.Snapshot(); s.HoldWaiting != 0 || s.State != LLM {
			t.Fatalf("the refusal left a trace: %+v", s)
		}
		// New shared holders are not held back by the refused attempt.
		if !l.TryAcquireShared() {
			t.Fatal("shared refused after a failed exclusive attempt")
		}
		l.ReleaseShared()
		l.ReleaseShared()
		if !l.TryAcquireExclusive(ImageJob) {
			t.Fatal("refused once the shared holders left")
		}
		l.ReleaseExclusive(false)
	})
	t.Run("exclusive waiter queued", func(t *testing.T) {
		l := New(&recorder{}, Options{})
		l.TryAcquireShared()
		img := queue(t, l, ImageJob, 1)
		l.ReleaseShared()
		if err := <-img; err != nil {
			t.Fatal(err)
		}
		// Between a hand-over and the next holder's release, and with a
		// waiter queued behind the holder, a try never jumps the queue.
		hold := queue(t, l, ExternalHold, 1)
		if l.TryAcquireExclusive(ExternalHold) {
			t.Fatal("granted while an image job holds the lock")
		}
		if !l.ReleaseExclusive(false) {
			t.Fatal("the queued hold was not handed the lock")
		}
		if err := <-hold; err != nil {
			t.Fatal(err)
		}
		l.ReleaseExclusive(false)
	})
	t.Run("waiter queued while idle", func(t *testing.T) {
		// A waiter can be queued with no holder only while shared holders
		// drain; once they have, it holds the lock. Check the queue alone
		// stops a try: an exclusive waiter behind a shared holder.
		l := New(&recorder{}, Options{})
		l.TryAcquireShared()
		img := queue(t, l, ImageJob, 1)
		if l.TryAcquireExclusive(ExternalHold) {
			t.Fatal("granted ahead of a queued waiter")
		}
		l.ReleaseShared()
		if err := <-img; err != nil {
			t.Fatal(err)
		}
		l.ReleaseExclusive(false)
	})
	t.Run("during a free", func(t *testing.T) {
		r := &recorder{}
		l := New(r, Options{})
		inFree, proceed := make(chan struct{}), make(chan struct{})
		r.onFree = func() { close(inFree); <-proceed }
		l.AcquireExclusive(bg, ImageJob)
		released := make(chan bool)
		go func() { released <- l.ReleaseExclusive(true) }()
		<-inFree
		if l.TryAcquireExclusive(ExternalHold) {
			t.Fatal("granted while the last job's free runs")
		}
		close(proceed)
		<-released
		if !l.TryAcquireExclusive(ExternalHold) {
			t.Fatal("refused once the free was done")
		}
		l.ReleaseExclusive(false)
		if r.frees.Load() != 1 {
			t.Fatalf("frees %d, want 1", r.frees.Load())
		}
	})
	t.Run("presence", func(t *testing.T) {
		// A presence try takes a free lock, and like any try never jumps
		// the queue: the front of the queue is for a waiting presence hold.
		l := New(&recorder{}, Options{})
		if !l.TryAcquireExclusive(PresenceHold) {
			t.Fatal("refused on an idle lock")
		}
		if s := l.State(); s != Hold {
			t.Fatalf("state %v, want hold", s)
		}
		img := queue(t, l, ImageJob, 1)
		if !l.ReleaseExclusive(false) {
			t.Fatal("the queued image job was not handed the lock")
		}
		if err := <-img; err != nil {
			t.Fatal(err)
		}
		hold := queue(t, l, ExternalHold, 1)
		if l.TryAcquireExclusive(PresenceHold) {
			t.Fatal("a presence try granted while the lock is held")
		}
		if s := l.Snapshot(); s.HoldWaiting != 1 || s.PresenceWaiting != 0 {
			t.Fatalf("the refusal left a trace: %+v", s)
		}
		l.ReleaseExclusive(false)
		if err := <-hold; err != nil {
			t.Fatal(err)
		}
		l.ReleaseExclusive(false)
	})
	t.Run("kind llm panics", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		New(&recorder{}, Options{}).TryAcquireExclusive(Kind(LLM))
	})
}
