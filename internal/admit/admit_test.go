package admit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"
)

func TestReadEndsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		cut := func() error { t.Error("cut called for a read that ended in time"); return nil }
		if err := Read(time.Now().Add(time.Second), func() error { return nil }, cut); err != nil {
			t.Fatalf("got %v, want nil", err)
		}
		if err := Read(time.Now().Add(time.Second), func() error { return boom }, cut); err != boom {
			t.Fatalf("got %v, want the read's error", err)
		}
	})
}

// TestReadCutAtTheDeadline: a read still blocked at the deadline is cut,
// and Read returns ErrLate only once the read has returned.
func TestReadCutAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		unblock := make(chan struct{})
		returned := false
		read := func() error {
			<-unblock
			returned = true
			return errors.New("read deadline exceeded")
		}
		var cutAt time.Duration
		cut := func() error {
			cutAt = time.Since(start)
			close(unblock)
			return nil
		}
		if err := Read(start.Add(300*time.Millisecond), read, cut); err != ErrLate {
			t.Fatalf("got %v, want ErrLate", err)
		}
		if cutAt != 300*time.Millisecond || !returned {
			t.Fatalf("cut at %v (want 300ms), read returned %v", cutAt, returned)
		}
	})
}

// TestReadThatCannotBeCut: when the cut fails, Read still waits for the
// read and says it was late.
func TestReadThatCannotBeCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		read := func() error { time.Sleep(time.Second); return nil }
		cut := func() error { return http.ErrNotSupported }
		if err := Read(start.Add(100*time.Millisecond), read, cut); err != ErrLate {
			t.Fatalf("got %v, want ErrLate", err)
		}
		if took := time.Since(start); took != time.Second {
			t.Fatalf("Read returned after %v, before the read had (1s)", took)
		}
	})
}

func TestReadPastDeadline(t *testing.T) {
	called := false
	err := Read(time.Now().Add(-time.Millisecond), func() error { called = true; return nil }, nil)
	if err != ErrLate || called {
		t.Fatalf("got %v, read called %v; want ErrLate without a read", err, called)
	}
}

func TestArrivalWithoutCaddy(t *testing.T) {
	before := time.Now()
	if a := Arrival(httptest.NewRequest("GET", "/", nil)); a.Before(before) || time.Since(a) > time.Second {
		t.Fatalf("arrival %v of a request Caddy did not start, want now", a)
	}
}

func TestCloseAfter(t *testing.T) {
	for _, tc := range []struct {
		major int
		want  string
	}{{1, "close"}, {2, ""}} {
		r := httptest.NewRequest("GET", "/", nil)
		r.ProtoMajor = tc.major
		w := httptest.NewRecorder()
		CloseAfter(w, r)
		if got := w.Header().Get("Connection"); got != tc.want {
			t.Errorf("HTTP/%d: Connection %q, want %q", tc.major, got, tc.want)
		}
	}
}
