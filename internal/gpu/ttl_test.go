package gpu

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// A hold's lease runs on the clock: it ends exactly when its TTL runs out,
// and a renewal moves that end. In a synctest bubble the minutes pass at
// once, and synctest.Wait lets every timer that fired do its work.
func TestHoldLeaseInFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, m := newFakeGPU(t, &fakeLLM{}, nil)
		h, err := g.TakeHold(context.Background(), "game", 2*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if g.State() != lock.Hold {
			t.Fatalf("after 1m of a 2m lease: %v, want hold", g.State())
		}
		if !h.Renew(2 * time.Minute) {
			t.Fatal("renewing a live hold failed")
		}
		time.Sleep(90 * time.Second) // past the first lease's end
		synctest.Wait()
		if g.State() != lock.Hold {
			t.Fatalf("90s after a renewal to 2m: %v, want hold", g.State())
		}
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if g.State() != lock.Idle {
			t.Fatalf("after the renewed lease: %v, want idle", g.State())
		}
		if ev := m.get(&m.holds); len(ev) != 2 || ev[0] != "granted" || ev[1] != "expired" {
			t.Fatalf("hold events %v, want granted then expired", ev)
		}
		if h.Renew(time.Minute) {
			t.Fatal("an expired hold was renewed")
		}
	})
}
