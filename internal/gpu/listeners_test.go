package gpu

import (
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
)

// The host's sockets are read again only when the listeners known may no
// longer be the ones: one gone, a port new or unheard, an unseen one, or
// the reading old.
func TestListenerCacheHolds(t *testing.T) {
	now := time.Unix(1e9, 0)
	table := procs.NewTable([]procs.Proc{{ID: procs.ID{PID: 10, Start: 1}}, {ID: procs.ID{PID: 20, Start: 2}}})
	lc := &listenerCache{pids: map[int][]int32{8080: {10}, 5800: {20}, 9000: {0}}, at: now}
	for _, c := range []struct {
		name  string
		ports []int
		after time.Duration
		want  bool
	}{
		{"both alive", []int{8080, 5800}, 0, true},
		{"a new port", []int{8080, 5801}, 0, false},
		{"an unseen listener", []int{9000}, 0, false},
		{"the reading old", []int{8080}, listenerRecheck, false},
	} {
		if got := lc.holds(table, c.ports, now.Add(c.after)); got != c.want {
			t.Errorf("%s: holds %v, want %v", c.name, got, c.want)
		}
	}
	gone := procs.NewTable([]procs.Proc{{ID: procs.ID{PID: 20, Start: 2}}})
	if lc.holds(gone, []int{8080}, now) {
		t.Error("holds with its listener gone")
	}
	if (&listenerCache{}).holds(table, []int{8080}, now) {
		t.Error("an empty cache holds")
	}
}
