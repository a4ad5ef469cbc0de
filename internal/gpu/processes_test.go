package gpu

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

// unseenLLM is an LLM engine whose processes cannot be seen from here (on
// another host), with a model loaded at its last contact, that then
// refuses connections.
type unseenLLM struct{ servedLLM }

func (e *unseenLLM) URL() string { return "http://192.0.2.7:11434" }

// fakeCard lists compute processes as a card would.
type fakeCard struct {
	mu   sync.Mutex
	pids map[int32]int64
}

func (f *fakeCard) processes(context.Context) (map[int32]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int32]int64{}
	for k, v := range f.pids {
		out[k] = v
	}
	return out, nil
}

func (f *fakeCard) set(pids map[int32]int64) {
	f.mu.Lock()
	f.pids = pids
	f.mu.Unlock()
}

// An engine whose processes cannot be seen, refusing connections after it
// had models loaded, is not counted empty on its word: without a card
// reading the hold is refused naming why; with one, the hold waits until
// the compute processes listed while it had models are gone.
func TestAnUnseenEngineNeedsTheCard(t *testing.T) {
	for _, withCard := range []bool{false, true} {
		t.Run(map[bool]string{false: "no card", true: "card"}[withCard], func(t *testing.T) {
			e := &unseenLLM{*newServedLLM()}
			e.kind.Servers = nil
			card := &fakeCard{pids: map[int32]int64{4242: 8 << 30}}
			c := testConfig()
			c.LLMs = []LLMEngine{e}
			c.UnloadTimeout = time.Second
			if withCard {
				c.CardProcesses = card.processes
			}
			g := New("unseen", &recorder{})
			t.Cleanup(g.Close)
			g.Apply(c, zap.NewNop())
			waitStatus(t, g, "started", func(st Status) bool { return st.State == "llm" || st.State == "idle" })
			g.lookAt(context.Background(), c, e, askModels) // it lists a model
			e.mu.Lock()
			e.refuses = true
			e.mu.Unlock()

			_, err := g.TakeHold(context.Background(), "test", time.Minute)
			if !errors.Is(err, ErrHoldPrepare) || !strings.Contains(err.Error(), "cannot be seen") {
				t.Fatalf("hold: %v; want refused: its processes cannot be seen", err)
			}
			if !withCard {
				return
			}
			card.set(map[int32]int64{5151: 1 << 30}) // the model's process is gone; another came
			h, err := g.TakeHold(context.Background(), "test", time.Minute)
			if err != nil {
				t.Fatalf("hold once the card shows the model gone: %v", err)
			}
			h.End("released")
		})
	}
}
