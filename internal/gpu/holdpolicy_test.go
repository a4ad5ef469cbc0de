package gpu

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A client's hold can be released once; a presence hold never by a
// client.
func TestHoldRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	h, err := f.g.TryHold(context.Background(), "game", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Leased(); err != nil {
		t.Fatalf("a client's hold: Leased %v", err)
	}
	if err := h.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := h.Release(); !errors.Is(err, ErrHoldEnded) {
		t.Fatalf("Release again: %v, want ErrHoldEnded", err)
	}
	f.waitState(t, "idle after the hold", func(st Status) bool { return st.State == "idle" && len(st.Holds) == 0 })
	p := &Hold{ID: "p", Owner: "gpu_process", Source: sourcePresence}
	if err := p.Leased(); !errors.Is(err, ErrPresenceHold) {
		t.Fatalf("a presence hold: Leased %v, want ErrPresenceHold", err)
	}
	if err := p.Release(); !errors.Is(err, ErrPresenceHold) {
		t.Fatalf("a presence hold: Release %v, want ErrPresenceHold", err)
	}
}
