package fleet

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestFollowerStaleAfterStall: a stream that sends one status and then
// stalls gives that status until stale has passed, then none.
func TestFollowerStaleAfterStall(t *testing.T) {
	sent := make(chan time.Time, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			t.Errorf("Accept %q", r.Header.Get("Accept"))
		}
		w.Header().Set("Content-Type", "text/event-stream")
		// Taken before the status goes: the follower cannot have seen it
		// earlier.
		at := time.Now()
		fmt.Fprint(w, "retry: 2000\nevent: status\ndata: {\"state\":\"idle\",\"engines\":[{\"class\":\"llm\",\"models\":[\"m\"]}]}\n\n")
		w.(http.Flusher).Flush()
		sent <- at
		<-r.Context().Done()
	}))
	defer srv.Close()
	f := NewFollower(srv.URL+"/healthz", srv.Client(), nil, "addr")
	defer f.Destruct()
	at := <-sent
	const stale = 300 * time.Millisecond
	deadline := time.Now().Add(5 * time.Second)
	for f.Snapshot(time.Now(), stale) == nil {
		if time.Now().After(deadline) {
			t.Fatal("no status")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if h := f.Snapshot(time.Now(), stale); !h.Loaded("m") || h.State != "idle" {
		t.Fatalf("snapshot %+v", h)
	}
	for f.Snapshot(time.Now(), stale) != nil {
		time.Sleep(5 * time.Millisecond)
	}
	if since := time.Since(at); since < stale {
		t.Fatalf("unknown after %v, before stale %v", since, stale)
	}
}
