package gpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/lock"
)

// ErrNoMemory is returned by AdmitModel in reject mode for a model that
// does not fit in the card's free memory now.
var ErrNoMemory = errors.New("not enough free video memory for the model")

// Admission is an LLM request admitted by AdmitModel: Done records its
// end.
type Admission struct {
	g       *GPU
	model   string
	pending uint64 // its pending load, 0 if the model was loaded or not checked
	// learning is set when the model's footprint is unknown: it is
	// learned from this load.
	learning bool
}

// AdmitModel admits an LLM request for model, for which the caller holds
// a shared place (TryLLM, WaitLLM), to the card's memory: at once if the
// model is loaded, its footprint unknown, the reading stale or missing
// (the whole-card rules), or it fits; else, in reject mode, ErrNoMemory;
// else it gives the shared place back, waits for the card's memory to
// change (a reading, an engine's change) and takes a place again, until
// deadline. With a nil error the caller holds the place and calls Done;
// with an error it holds none.
func (g *GPU) AdmitModel(ctx context.Context, model string, deadline time.Time, reject bool) (*Admission, error) {
	model = modelKey(model)
	var stopWaiting func()
	defer func() {
		if stopWaiting != nil {
			stopWaiting()
		}
	}()
	for {
		ch := g.Changed()
		if a := g.tryAdmit(model); a != nil {
			if a.learning {
				g.measureBase(ctx, a.pending)
			}
			return a, nil
		}
		g.ReleaseLLM()
		if reject {
			return nil, ErrNoMemory
		}
		if stopWaiting == nil {
			stopWaiting = g.waitMemory(ctx)
		}
		if err := waitChange(ctx, ch, deadline); err != nil {
			return nil, err
		}
		if _, err := g.WaitLLM(ctx, deadline, nil); err != nil {
			return nil, err
		}
	}
}

// waitChange waits for ch, or returns the error of a wait that ended:
// ctx's (a *ClientGoneError) or the deadline's (ErrWaitTimeout).
func waitChange(ctx context.Context, ch <-chan struct{}, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return &ClientGoneError{While: "waiting for video memory"}
	case <-t.C:
		return ErrWaitTimeout
	}
}

// waitMemory records a request that waits for memory: the status shows
// it waiting_for vram, and each reading signals a change while it waits.
// The returned func records the end of its wait.
func (g *GPU) waitMemory(ctx context.Context) (done func()) {
	return g.waitFor(ctx, lock.LLM, time.Now(), waitingForVRAM)
}

// tryAdmit admits the request if it fits now, and records it: in flight
// for its model, and as a pending load if the model was not loaded.
func (g *GPU) tryAdmit(model string) *Admission {
	c := g.cfg()
	g.mu.Lock()
	defer g.mu.Unlock()
	if c == nil || c.Memory == nil {
		return &Admission{g: g}
	}
	fit, need := g.fitsLocked(c.Memory, model, time.Now())
	if !fit {
		return nil
	}
	return g.recordLocked(model, need)
}

// recordLocked records an admitted request for model: in flight, and as
// a pending load that reserves need (unless 0); g.mu is held.
func (g *GPU) recordLocked(model string, need int64) *Admission {
	m := &g.mem
	a := &Admission{g: g, model: model}
	if model == "" {
		return a
	}
	if m.inflight == nil {
		m.inflight = map[string]int{}
	}
	m.inflight[model]++
	if need != 0 {
		if m.pending == nil {
			m.pending = map[uint64]*pendingLoad{}
		}
		m.lastID++
		a.pending = m.lastID
		a.learning = need == unknownBytes
		m.pending[a.pending] = &pendingLoad{model: model, bytes: need}
		g.touch()
	}
	return a
}

// fitsLocked reports whether model may go to the card now, and what its
// admission reserves until a reading shows it loaded: 0 for nothing (the
// model is loaded or loading, the reading is stale, no model was named),
// unknownBytes for a model whose footprint is unknown. g.mu is held.
func (g *GPU) fitsLocked(c *MemoryConfig, model string, now time.Time) (fit bool, need int64) {
	m := &g.mem
	if model == "" || m.stale(c, now) {
		return true, 0
	}
	if _, ok := m.resident[model]; ok {
		return true, 0
	}
	for _, p := range m.pending {
		if p.model == model {
			return true, 0 // loading: its memory is reserved once
		}
	}
	fp, known := m.footprintOf(c, model)
	if !known {
		return true, unknownBytes
	}
	need = fp.Bytes
	if fp.Alone {
		need = m.reading.Total - c.Reserve
	}
	avail, ok := m.available(c)
	return ok && avail >= need, need
}

// stale reports whether the last reading is missing or older than
// staleAfter poll intervals: admission then follows the whole-card rules.
func (m *memState) stale(c *MemoryConfig, now time.Time) bool {
	return m.reading.At.IsZero() || now.Sub(m.reading.At) > staleAfter*c.Poll
}

// available is the memory a model not loaded may take: room, plus what
// idle models of an engine that evicts them hold.
func (m *memState) available(c *MemoryConfig) (int64, bool) {
	avail, ok := m.room(c)
	if !ok {
		return 0, false
	}
	for model, r := range m.resident {
		if r.evicts && m.inflight[model] == 0 {
			avail += r.vram
		}
	}
	return avail, true
}

// room is what the card has free, less the reserve and the footprints of
// the pending loads. Not ok while a load of unknown size is pending:
// nothing is known to be free then.
func (m *memState) room(c *MemoryConfig) (int64, bool) {
	avail := m.reading.Free - c.Reserve
	for _, p := range m.pending {
		if p.bytes == unknownBytes {
			return 0, false
		}
		avail -= p.bytes
	}
	return avail, true
}

// oomTexts are what the engines answer when a model does not fit:
// Ollama ("model requires more system memory ... than is available",
// "cudaMalloc failed: out of memory" from its runner), llama.cpp
// ("failed to allocate", "out of memory"), vLLM ("CUDA out of memory").
var oomTexts = [][]byte{
	[]byte("out of memory"),
	[]byte("requires more system memory"),
	[]byte("failed to allocate"),
}

// Done records the request's end: status is its answer's, head the start
// of an error answer's body (nil otherwise). An engine's answer that it
// ran out of memory for the model forgets the model's footprint: from
// then on it runs alone.
func (a *Admission) Done(status int, head []byte) {
	if a == nil || a.model == "" {
		return
	}
	g := a.g
	oom := status >= 500 && isOOM(head)
	g.update(func() {
		m := &g.mem
		if m.inflight[a.model]--; m.inflight[a.model] <= 0 {
			delete(m.inflight, a.model)
		}
		if p := m.pending[a.pending]; p != nil {
			p.ended = time.Now()
			if oom {
				delete(m.pending, a.pending)
			}
		}
		if oom {
			eng := ""
			if r, ok := m.resident[a.model]; ok {
				eng = r.engine
			}
			m.forget(eng, a.model, time.Now())
		}
	})
	if oom {
		g.log().Warn("the engine ran out of video memory for the model: its footprint is forgotten, and it runs alone from now on",
			zap.String("model", a.model), zap.Int("status", status))
	}
}

func isOOM(head []byte) bool {
	lower := bytes.ToLower(head)
	for _, t := range oomTexts {
		if bytes.Contains(lower, t) {
			return true
		}
	}
	return false
}

// memoryCause says why model waits or is refused, for a busy answer.
func (g *GPU) memoryCause(model string) string {
	model = modelKey(model)
	c := g.cfg()
	g.mu.Lock()
	defer g.mu.Unlock()
	if c == nil || c.Memory == nil {
		return "video memory"
	}
	fp, _ := g.mem.footprintOf(c.Memory, model)
	need := fp.Bytes
	if fp.Alone {
		need = g.mem.reading.Total - c.Memory.Reserve
	}
	avail, _ := g.mem.available(c.Memory)
	return fmt.Sprintf("too little free video memory for %s (needs %s, %s available beyond vram_reserve)", model, mib(need), mib(max(avail, 0)))
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }
