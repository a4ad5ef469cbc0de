package presence

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// An engine whose processes this machine cannot know turns gpu_process
// and gpu_busy off, saying why; one that listens here is its own, and one
// that is down owns nothing.
func TestEnginesHere(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	url := "http://" + ln.Addr().String()
	own, err := enginesHere([]string{url})(t.Context())
	switch {
	case underWine():
		// Wine 8.0's socket table names no owner: the listener cannot
		// be seen, which turns the conditions off.
		if !IsOff(err) || !strings.Contains(err.Error(), "may not see") {
			t.Fatalf("an engine listening here, under Wine: %v, want off", err)
		}
	case err != nil || !own[int32(os.Getpid())]:
		t.Fatalf("an engine listening here: own %v, %v; want this process", own, err)
	}

	a := engineAddrs([]string{url})[0]
	for _, tc := range []struct {
		name string
		pids []int32
		want string // "" for no error
	}{
		{"answers, but no listener is visible (a container)", nil, "answers, but no process on this machine listens on port " + strconv.Itoa(a.port)},
		{"a listener this process may not see", []int32{0}, "may not see"},
		{"published by a container's port proxy", []int32{startHelper(t, copyExe(t, "docker-proxy"), "", "wait").pid()}, "is published by docker-proxy"},
	} {
		err := ownListeners(t.Context(), a, tc.pids, map[int32]bool{})
		if !IsOff(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want off: %q", tc.name, err, tc.want)
		}
	}
	ln.Close()
	if err := ownListeners(context.Background(), a, nil, map[int32]bool{}); err != nil {
		t.Fatalf("an engine that is down: %v, want nothing", err)
	}
}

// gpu_busy turns off, and says why, from its first sample while an
// engine's processes cannot be known, and stays off until they can.
func TestOwnCheckStaysOffUntilKnown(t *testing.T) {
	hidden := true
	calls := 0
	o := ownCheck{f: func(context.Context) (map[int32]bool, error) {
		calls++
		if hidden {
			return nil, offf("the engine runs in a container")
		}
		return map[int32]bool{4242: true}, nil
	}}
	for i := range 3 {
		if _, err := o.check(t.Context(), false); !IsOff(err) {
			t.Fatalf("check %d: %v, want off", i, err)
		}
	}
	hidden = false
	if own, err := o.check(t.Context(), false); err != nil || !own[4242] {
		t.Fatalf("once known: %v, %v", own, err)
	}
	if _, err := o.check(t.Context(), false); err != nil || calls != 4 {
		t.Fatalf("with nothing to judge: %v, %d calls, want no new call", err, calls)
	}
}
