package gpu

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu/ledger"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// A co_resident model loaded when an image job comes stays loaded through
// it when the job's workflow is measured and leaves room for it: the next
// request for it goes beside the job with nothing to load. A workflow too
// large for it, or never measured, has it unloaded as before.
func TestCoResidentKeptThroughTheNextJob(t *testing.T) {
	t.Parallel()
	card := gputest.New()
	card.ShareAmong("ollama", "comfy") // co-residency shares the card; over-commitment is what must not happen
	f := newMemFixtureWith(t, card, map[string]int64{"small": 4 * gib}, comfytest.Options{JobBytes: 8 * gib},
		func(m *MemoryConfig) {
			m.Models["small"] = 4 * gib
			m.Models["comfyui:wf"] = 8 * gib
			m.Models["comfyui:huge"] = 22 * gib
			m.CoResident = []string{"small"}
		})
	listed := func(st Status) bool {
		return st.VRAM != nil && slices.ContainsFunc(st.VRAM.Loaded, func(l LoadedStatus) bool { return l.Model == "small" })
	}
	// The load admitted at idle stays pending until a reading taken after
	// its request's end, which the listing that shows small loaded may
	// come before: only once it is seen is any pending load the job's.
	seen := func(st Status) bool { return listed(st) && st.VRAM.PendingBytes == 0 }
	// After a start, what the LLM engine holds is unknown: the first
	// emptying confirms it strictly, and keeps nothing.
	f.sendJob(t, "comfyui:wf", 0)
	f.waitState(t, "idle after the first job", func(st Status) bool { return st.State == "idle" })
	for _, tc := range []struct {
		workflow string
		kept     bool
	}{
		{"comfyui:wf", true},              // 24 GiB card: 20 free beside small, 8 needed
		{"comfyui:huge", false},           // 22 needed
		{"comfyui:never-measured", false}, // runs alone
	} {
		a, err := f.admit(t, "small", 5*time.Second, false)
		if err != nil {
			t.Fatal(err)
		}
		f.loadModel(t, "small")
		f.done(a)
		f.waitState(t, "small listed as loaded, its load seen", seen)

		f.sendJob(t, tc.workflow, 300*time.Millisecond)
		st := f.waitState(t, tc.workflow+" running", func(st Status) bool { return st.State == "image" && st.VRAM.Job != nil })
		if kept := slices.Contains(f.ollama.Loaded(), "small:latest"); kept != tc.kept {
			t.Fatalf("%s: small loaded during the job: %v, want %v\n%s", tc.workflow, kept, tc.kept, gputest.Dump(card.Events()))
		}
		if !tc.kept && listed(st) {
			t.Fatalf("%s: small unloaded for the job, but still listed as loaded: %+v", tc.workflow, st.VRAM.Loaded)
		}
		if tc.kept {
			b := f.besideSoon(t, "small")
			if p := f.g.Status().VRAM.PendingBytes; p != 0 || b.led.Pending != 0 {
				t.Errorf("small, kept loaded, admitted beside the job with %d bytes pending: want none to load (its own pending load: #%d)", p, b.led.Pending)
			}
			b.Done(200, nil)
			f.g.ReleaseLLM()
		}
		f.waitState(t, "idle after "+tc.workflow, func(st Status) bool { return st.State == "idle" })
	}
	loads := 0
	for _, e := range card.Events() {
		if e.Service == "ollama" && strings.HasPrefix(e.What, "load small") {
			loads++
		}
	}
	if loads != 2 {
		t.Errorf("small loaded %d times, want 2: before the first job and after the second, none beside the first", loads)
	}
}

// What the card held as a job was sent is a reading taken after the GPU
// was readied for it: one taken before may still show the models just
// unloaded, which would hide that much of the job's peak.
func TestBaseReadAfterTheGPUWasReadied(t *testing.T) {
	t.Parallel()
	// The card: 24 GiB, nothing on it; read once at the start, then not
	// for an hour, so that the readings here are the test's.
	f := memFixture(t, nil, func(m *MemoryConfig) { m.Poll = time.Hour })
	c := f.g.cfg()
	readied := time.Now()
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{readied.Add(-time.Millisecond), 0},      // read again: nothing on the card
		{readied.Add(time.Millisecond), 4 * gib}, // taken since: as it says
	} {
		f.g.update(func() {
			f.g.mem.ledger.Take(c.Memory.rules(), ledger.Reading{Total: 24 * gib, Free: 20 * gib, At: tc.at})
		})
		if base, ok := f.g.baseReading(c, "comfyui:wf", readied); !ok || base != tc.want {
			t.Errorf("reading taken %v after the GPU was readied: base %d MiB (%v), want %d MiB",
				tc.at.Sub(readied), base>>20, ok, tc.want>>20)
		}
	}
	if _, ok := f.g.baseReading(c, "", readied); ok {
		t.Error("a job without a workflow read the card")
	}
}
