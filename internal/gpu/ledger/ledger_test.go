package ledger

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const gib = int64(1) << 30

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// poll is the poll interval of the tests' config: a reading is stale
// after three.
const poll = time.Second

// card is a ledger's starting state, built through its API.
type card struct {
	total, free int64 // read at t0; no reading when total is 0
	reserve     int64
	models      map[string]int64    // model_vram
	learned     map[string]int64    // footprints learned at t0
	alone       []string            // models that ran out of memory at t0
	resident    map[string]Resident // listed at t0
	busy        []string            // admitted requests for loaded models
	pending     map[string]int64    // admitted loads not yet seen (-1: unknown footprint)
}

func (cd card) build(t *testing.T) (*Ledger, Config) {
	t.Helper()
	c := Config{Reserve: cd.reserve, Poll: poll, Models: cd.models}
	l := &Ledger{}
	if cd.total != 0 {
		l.Take(c, Reading{UUID: "GPU-1", Total: cd.total, Free: cd.free, At: t0})
	}
	for m, b := range cd.learned {
		if !l.Learn(c, "ollama", m, b, t0) {
			t.Fatalf("%s not learned", m)
		}
	}
	for _, m := range cd.alone {
		l.Forget("ollama", m, t0)
	}
	if cd.resident != nil {
		l.List(cd.resident, nil, l.Emptyings())
	}
	for _, m := range cd.busy {
		l.Admit(m, 0)
	}
	for m, b := range cd.pending {
		l.Admit(m, b)
	}
	return l, c
}

func TestFits(t *testing.T) {
	ollama := func(b int64) Resident { return Resident{Engine: "ollama", VRAM: b, Evicts: true} }
	for _, tc := range []struct {
		name  string
		card  card
		model string
		at    time.Duration // after t0
		// staleAdmits is vram_stale admit: a stale or missing reading
		// admits as if memory were not checked.
		staleAdmits bool
		fit         bool
		need        int64
	}{
		{name: "no model named", card: card{total: 24 * gib, free: 0}, model: "", fit: true},
		{name: "no reading: wait for one", card: card{models: map[string]int64{"m": 4 * gib}}, model: "m"},
		{name: "stale reading: wait for a fresh one", card: card{total: 24 * gib, free: 24 * gib, models: map[string]int64{"m": 4 * gib}}, model: "m", at: 3*poll + 1},
		{name: "stale reading, loaded model: no reading needed", card: card{total: 24 * gib, free: 0, resident: map[string]Resident{"m": {Engine: "llamacpp"}}}, model: "m", at: 3*poll + 1, fit: true},
		{name: "no reading, vram_stale admit", card: card{models: map[string]int64{"m": 4 * gib}}, model: "m", staleAdmits: true, fit: true},
		{name: "stale reading, vram_stale admit", card: card{total: 24 * gib, free: 0, models: map[string]int64{"m": 4 * gib}}, model: "m", at: 3*poll + 1, staleAdmits: true, fit: true},
		{name: "reading three polls old is fresh", card: card{total: 24 * gib, free: 0, models: map[string]int64{"m": 4 * gib}}, model: "m", at: 3 * poll, need: 4 * gib},
		{name: "loaded", card: card{total: 24 * gib, free: 0, resident: map[string]Resident{"m": {Engine: "llamacpp"}}}, model: "m", fit: true},
		{name: "loading: reserved once", card: card{total: 24 * gib, free: 0, pending: map[string]int64{"m": 4 * gib}}, model: "m", fit: true},
		{name: "footprint unknown", card: card{total: 24 * gib, free: 0}, model: "m", fit: true, need: -1},
		{name: "fits beyond the reserve", card: card{total: 24 * gib, free: 8 * gib, reserve: gib, models: map[string]int64{"m": 7 * gib}}, model: "m", fit: true, need: 7 * gib},
		{name: "the reserve is kept", card: card{total: 24 * gib, free: 8 * gib, reserve: gib, models: map[string]int64{"m": 7*gib + 1}}, model: "m", need: 7*gib + 1},
		{name: "a pending load counts", card: card{total: 24 * gib, free: 24 * gib, models: map[string]int64{"a": 14 * gib, "b": 14 * gib}, pending: map[string]int64{"a": 14 * gib}}, model: "b", need: 14 * gib},
		{name: "a pending load of unknown size leaves nothing known free", card: card{total: 24 * gib, free: 24 * gib, models: map[string]int64{"b": gib}, pending: map[string]int64{"a": -1}}, model: "b", need: gib},
		{name: "an idle model of an engine that evicts is room", card: card{total: 24 * gib, free: 0, models: map[string]int64{"b": 10 * gib}, resident: map[string]Resident{"a": ollama(18 * gib)}}, model: "b", fit: true, need: 10 * gib},
		{name: "a busy model is not", card: card{total: 24 * gib, free: 0, models: map[string]int64{"b": 10 * gib}, resident: map[string]Resident{"a": ollama(18 * gib)}, busy: []string{"a"}}, model: "b", need: 10 * gib},
		{name: "nor one of an engine that does not evict", card: card{total: 24 * gib, free: 0, models: map[string]int64{"b": 10 * gib}, resident: map[string]Resident{"a": {Engine: "vllm", VRAM: 18 * gib}}}, model: "b", need: 10 * gib},
		{name: "learned footprint", card: card{total: 24 * gib, free: 6 * gib, learned: map[string]int64{"m": 6 * gib}}, model: "m", fit: true, need: 6 * gib},
		{name: "configured over learned", card: card{total: 24 * gib, free: 6 * gib, models: map[string]int64{"m": 8 * gib}, learned: map[string]int64{"x": 1}}, model: "m", need: 8 * gib},
		{name: "alone: the card less the reserve", card: card{total: 24 * gib, free: 24 * gib, reserve: gib, alone: []string{"m"}}, model: "m", fit: true, need: 23 * gib},
		{name: "alone, beside a game", card: card{total: 24 * gib, free: 23 * gib, reserve: gib, alone: []string{"m"}}, model: "m", need: 23 * gib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c := tc.card.build(t)
			c.StaleAdmits = tc.staleAdmits
			fit, need := l.Fits(c, tc.model, t0.Add(tc.at))
			if fit != tc.fit || need != tc.need {
				t.Errorf("Fits = %v, %d MiB; want %v, %d MiB", fit, need>>20, tc.fit, tc.need>>20)
			}
			_, ok := l.TryAdmit(c, tc.model, t0.Add(tc.at))
			if ok != tc.fit {
				t.Errorf("TryAdmit admitted %v, want %v", ok, tc.fit)
			}
		})
	}
}

// A pending load counts until a reading taken after its request ended
// shows it (or shows it did not load); an engine's out-of-memory answer
// drops it at once and has the model run alone.
func TestPendingLoads(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     bool          // the request ended at t0+1s
		oom     bool          // with an out-of-memory answer
		readAt  time.Duration // the next reading, after t0
		pending int64
	}{
		{name: "request running", readAt: 5 * time.Second, pending: 4 * gib},
		{name: "ended, read at the same instant", end: true, readAt: time.Second, pending: 4 * gib},
		{name: "ended, read after", end: true, readAt: 2 * time.Second},
		{name: "out of memory", end: true, oom: true, readAt: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c := card{total: 24 * gib, free: 24 * gib, models: map[string]int64{"m": 4 * gib}}.build(t)
			l.Forget("", "x", t0) // a model name to be kept apart from m
			a, ok := l.TryAdmit(c, "m", t0)
			if !ok || a.Pending == 0 || a.Learning {
				t.Fatalf("admitted %+v, %v; want a pending load of a known footprint", a, ok)
			}
			if tc.end {
				l.End(a, tc.oom, t0.Add(time.Second))
			}
			if tc.readAt > 0 {
				l.Take(c, Reading{Total: 24 * gib, Free: 20 * gib, At: t0.Add(tc.readAt)})
				l.LearnFrom(c, nil, -1, t0.Add(tc.readAt))
			}
			snap := l.Snapshot(c, t0.Add(tc.readAt))
			if snap.PendingBytes != tc.pending {
				t.Errorf("pending %d MiB, want %d MiB", snap.PendingBytes>>20, tc.pending>>20)
			}
			fp, _ := l.FootprintOf(Config{}, "m")
			if fp.Alone != tc.oom {
				t.Errorf("m alone: %v, want %v", fp.Alone, tc.oom)
			}
		})
	}
}

func TestStale(t *testing.T) {
	for _, tc := range []struct {
		name    string
		read    bool
		age     time.Duration
		stale   bool
		changed bool // a reading of the same figures then
	}{
		{name: "no reading", stale: true, changed: true},
		{name: "fresh", read: true, age: poll},
		{name: "three polls old", read: true, age: 3 * poll},
		{name: "older", read: true, age: 3*poll + time.Nanosecond, stale: true, changed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Poll: poll}
			l := &Ledger{}
			if tc.read {
				l.Take(c, Reading{Total: 24 * gib, Free: 24 * gib, At: t0})
			}
			now := t0.Add(tc.age)
			if got := l.Stale(c, now); got != tc.stale {
				t.Errorf("stale %v, want %v", got, tc.stale)
			}
			if got := l.Take(c, Reading{Total: 24 * gib, Free: 24 * gib, At: now}); got != tc.changed {
				t.Errorf("the same figures at %v: changed %v, want %v", tc.age, got, tc.changed)
			}
			if l.Stale(c, now) {
				t.Error("stale right after a reading")
			}
		})
	}
}

func TestTakeChanges(t *testing.T) {
	c := Config{Poll: poll}
	l := &Ledger{}
	l.Take(c, Reading{Total: 24 * gib, Free: 20 * gib, At: t0})
	for i, tc := range []struct {
		total, free int64
		changed     bool
	}{
		{24 * gib, 20 * gib, false},
		{24 * gib, 19 * gib, true},
		{23 * gib, 19 * gib, true},
		{23 * gib, 19 * gib, false},
	} {
		if got := l.Take(c, Reading{Total: tc.total, Free: tc.free, At: t0.Add(time.Duration(i+1) * poll)}); got != tc.changed {
			t.Errorf("reading %d: changed %v, want %v", i, got, tc.changed)
		}
	}
}

// Footprints follow what is seen, up or down, but a configured one wins,
// and one that ran out of memory is replaced only by a later sight.
func TestLearn(t *testing.T) {
	c := Config{Poll: poll, Models: map[string]int64{"conf": gib}}
	for _, tc := range []struct {
		name    string
		before  int64 // learned at t0 (0: none; -1: alone at t0)
		engine  string
		bytes   int64
		at      time.Duration
		changed bool
		want    int64 // the footprint after
	}{
		{name: "first", bytes: 6 * gib, changed: true, want: 6 * gib},
		{name: "rises", before: 6 * gib, bytes: 8 * gib, at: time.Second, changed: true, want: 8 * gib},
		{name: "falls", before: 8 * gib, bytes: 6 * gib, at: time.Second, changed: true, want: 6 * gib},
		{name: "same", before: 6 * gib, bytes: 6 * gib, at: time.Second, want: 6 * gib},
		{name: "same on another engine", before: 6 * gib, engine: "llamacpp", bytes: 6 * gib, at: time.Second, changed: true, want: 6 * gib},
		{name: "nothing", before: 6 * gib, bytes: 0, at: time.Second, want: 6 * gib},
		{name: "alone, seen since", before: -1, bytes: 6 * gib, at: time.Second, changed: true, want: 6 * gib},
		{name: "alone, seen before", before: -1, bytes: 6 * gib, at: -time.Second, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Ledger{}
			switch {
			case tc.before > 0:
				l.Learn(c, "ollama", "m", tc.before, t0)
			case tc.before < 0:
				l.Forget("ollama", "m", t0)
			}
			engine := tc.engine
			if engine == "" {
				engine = "ollama"
			}
			if got := l.Learn(c, engine, "m", tc.bytes, t0.Add(tc.at)); got != tc.changed {
				t.Errorf("changed %v, want %v", got, tc.changed)
			}
			if fp, _ := l.FootprintOf(c, "m"); fp.Bytes != tc.want {
				t.Errorf("footprint %+v, want %d MiB", fp, tc.want>>20)
			}
		})
	}
	l := &Ledger{}
	if l.Learn(c, "ollama", "conf", 6*gib, t0) {
		t.Error("learned a model whose footprint is configured")
	}
	if fp, _ := l.FootprintOf(c, "conf"); fp.Bytes != gib {
		t.Errorf("configured footprint %+v, want 1 GiB", fp)
	}
}

// A reading learns what an engine reports of a model wholly on the
// card, and, for a load of unknown footprint that was the only one, the
// engines' processes' growth; the larger of the two counts.
func TestLearnFrom(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sized      []Sized
		base, proc int64 // the engines' memory at admission, and at the reading (-1: not read)
		other      bool  // another load of unknown footprint is pending
		want       int64
	}{
		{name: "reported, wholly on the GPU", sized: []Sized{{Engine: "ollama", Model: "m", Size: 6 * gib, VRAM: 6 * gib}}, proc: -1, want: 6 * gib},
		{name: "partly offloaded teaches nothing", sized: []Sized{{Engine: "ollama", Model: "m", Size: 30 * gib, VRAM: 24 * gib}}, proc: -1},
		{name: "processes' growth", base: 2 * gib, proc: 9 * gib, want: 7 * gib},
		{name: "the larger: processes", sized: []Sized{{Engine: "ollama", Model: "m", Size: 6 * gib, VRAM: 6 * gib}}, base: 2 * gib, proc: 9 * gib, want: 7 * gib},
		{name: "the larger: reported", sized: []Sized{{Engine: "ollama", Model: "m", Size: 6 * gib, VRAM: 6 * gib}}, base: 2 * gib, proc: 3 * gib, want: 6 * gib},
		{name: "not the only load", base: 2 * gib, proc: 9 * gib, other: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, c := card{total: 24 * gib, free: 24 * gib}.build(t)
			a, ok := l.TryAdmit(c, "m", t0)
			if !ok || !a.Learning {
				t.Fatalf("admitted %+v, %v; want it learned", a, ok)
			}
			if tc.other {
				l.Admit("o", -1)
			}
			if tc.proc >= 0 {
				l.Measured(a.Pending, tc.base)
				if !l.Learning() {
					t.Fatal("not learning once measured")
				}
			}
			l.End(a, false, t0.Add(time.Second))
			l.List(map[string]Resident{"m": {Engine: "ollama"}}, nil, l.Emptyings())
			at := t0.Add(2 * time.Second)
			l.Take(c, Reading{Total: 24 * gib, Free: 16 * gib, At: at})
			changed, dropped := l.LearnFrom(c, tc.sized, tc.proc, at)
			if !dropped {
				t.Error("the pending load was not dropped")
			}
			fp, known := l.FootprintOf(c, "m")
			if changed != (tc.want != 0) || known != (tc.want != 0) || fp.Bytes != tc.want {
				t.Errorf("learned %+v (%v, changed %v), want %d MiB", fp, known, changed, tc.want>>20)
			}
		})
	}
}

// A listing replaces what was known, but for the engines that could not
// be listed; one begun before an engine was emptied is not applied, and
// an emptying drops the engine's models at once, but those it kept.
func TestResidents(t *testing.T) {
	c := Config{Poll: poll}
	l := &Ledger{}
	l.List(map[string]Resident{"a": {Engine: "ollama"}, "b": {Engine: "ollama"}, "v": {Engine: "vllm"}}, nil, 0)
	if l.List(map[string]Resident{"a": {Engine: "ollama"}}, map[string]bool{"vllm": true, "ollama": false}, 0) != true {
		t.Error("a listing without b: no change")
	}
	if !l.Loaded("v") || l.Loaded("b") {
		t.Errorf("after a listing vllm failed: %+v", l.Snapshot(c, t0).Loaded)
	}
	since := l.Emptyings()
	l.Emptied("ollama", []string{"k"})
	l.Emptied("vllm", nil)
	if l.Loaded("a") || l.Loaded("v") {
		t.Errorf("after the emptyings: %+v", l.Snapshot(c, t0).Loaded)
	}
	if l.List(map[string]Resident{"a": {Engine: "ollama"}}, nil, since) || l.Loaded("a") {
		t.Error("a listing begun before the emptying was applied")
	}
	l.List(map[string]Resident{"k": {Engine: "ollama"}, "z": {Engine: "ollama"}}, nil, l.Emptyings())
	l.Emptied("ollama", []string{"k"})
	if !l.Loaded("k") || l.Loaded("z") {
		t.Errorf("the emptying kept %+v, want k alone", l.Snapshot(c, t0).Loaded)
	}
}

// Beside a running image job, a co_resident model goes when the card's
// free memory, less the reserve and pending loads, covers it and what
// the job may still grow by; an idle model is no room for the job's
// growth, as an engine evicts it for a model it loads, never for a job.
func TestBeside(t *testing.T) {
	ollama := Resident{Engine: "ollama", VRAM: 4 * gib, Evicts: true}
	for _, tc := range []struct {
		name     string
		total    int64 // the card; 8 GiB used: idle a's 4, and the job's 4 of its peak
		peak     int64
		readBase bool
		reserve  int64
		model    string
		at       time.Duration
		pending  int64
		want     bool
	}{
		{name: "fits: 16 free, b's 6 and the job's 8 more", total: 24 * gib, peak: 12 * gib, readBase: true, model: "b", want: true},
		{name: "2 short, which evicting idle a would cover", total: 20 * gib, peak: 12 * gib, readBase: true, model: "b"},
		{name: "the reserve counts", total: 24 * gib, peak: 12 * gib, readBase: true, reserve: 3 * gib, model: "b"},
		{name: "a pending load counts", total: 24 * gib, peak: 12 * gib, readBase: true, pending: 3 * gib, model: "b"},
		{name: "never measured", total: 24 * gib, readBase: true, model: "b"},
		{name: "no base read", total: 24 * gib, peak: 12 * gib, model: "b"},
		{name: "stale", total: 24 * gib, peak: 12 * gib, readBase: true, model: "b", at: 4 * poll},
		{name: "loaded: nothing to load", total: 20 * gib, peak: 12 * gib, readBase: true, model: "a", want: true},
		{name: "footprint unknown", total: 24 * gib, peak: 12 * gib, readBase: true, model: "u"},
		{name: "runs alone", total: 24 * gib, peak: 12 * gib, readBase: true, model: "x"},
		{name: "grown past its peak", total: 14 * gib, peak: 2 * gib, readBase: true, model: "b", want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Poll: poll, Reserve: tc.reserve, Models: map[string]int64{"b": 6 * gib, "p": tc.pending}}
			l := &Ledger{}
			l.Forget("ollama", "x", t0)
			if tc.peak > 0 {
				c.Models["wf"] = tc.peak
			}
			l.JobBegins(c, JobStart{Owner: 1, Engine: "comfyui", Workflow: "wf", Base: 4 * gib, ReadBase: tc.readBase})
			l.Take(c, Reading{Total: tc.total, Free: tc.total - 8*gib, At: t0})
			l.List(map[string]Resident{"a": ollama}, nil, 0)
			if tc.pending > 0 {
				l.Admit("p", tc.pending)
			}
			a, ok := l.Beside(c, tc.model, t0.Add(tc.at))
			if ok != tc.want {
				t.Fatalf("admitted beside the job: %v, want %v (%+v)", ok, tc.want, l.Snapshot(c, t0))
			}
			if !ok {
				return
			}
			snap := l.Snapshot(c, t0)
			if want := map[bool]int64{true: 0, false: 6 * gib}[tc.model == "a"]; snap.Job.BesideBytes != want || (a.Pending != 0) != (want != 0) {
				t.Errorf("beside %d MiB, pending %d; want %d MiB", snap.Job.BesideBytes>>20, a.Pending, want>>20)
			}
		})
	}
}

// What goes beside a job counts for the next: two models that each fit
// alone beside it do not both.
func TestBesideCountsWhatWentBefore(t *testing.T) {
	c := Config{Poll: poll, Models: map[string]int64{"b": 6 * gib, "c": 6 * gib, "wf": 8 * gib}}
	l := &Ledger{}
	l.JobBegins(c, JobStart{Owner: 1, Workflow: "wf", Base: 0, ReadBase: true})
	l.Take(c, Reading{Total: 20 * gib, Free: 20 * gib, At: t0})
	if _, ok := l.Beside(c, "b", t0); !ok {
		t.Fatal("b not admitted: 20 free, 8 for the job, 6 for b")
	}
	if _, ok := l.Beside(c, "c", t0); ok {
		t.Fatal("c admitted: 6 for it, 6 pending for b, 8 for the job, of 20")
	}
}

// A job's peak is learned when it began freed, nothing was kept through
// it nor went beside it, and a base was read.
func TestJobPeak(t *testing.T) {
	for _, tc := range []struct {
		name     string
		start    JobStart
		readings []int64 // used, in GiB, at each reading during the job
		beside   bool
		owner    any // which job ends
		want     int64
	}{
		{name: "alone", start: JobStart{Workflow: "wf", Base: 2 * gib, ReadBase: true}, readings: []int64{6, 10, 7}, want: 8 * gib},
		{name: "base from the first reading", start: JobStart{Workflow: "wf"}, readings: []int64{3, 10}, want: 7 * gib},
		{name: "after a hand-over", start: JobStart{Workflow: "wf", Debt: true, ReadBase: true}, readings: []int64{10}},
		{name: "models kept through it", start: JobStart{Workflow: "wf", KeptPeak: 4 * gib, ReadBase: true}, readings: []int64{10}},
		{name: "a model beside it", start: JobStart{Workflow: "wf", ReadBase: true}, readings: []int64{10}, beside: true},
		{name: "no workflow", start: JobStart{ReadBase: true}, readings: []int64{10}},
		{name: "no growth", start: JobStart{Workflow: "wf", Base: 2 * gib, ReadBase: true}, readings: []int64{2}},
		{name: "another job ends", start: JobStart{Workflow: "wf", ReadBase: true}, readings: []int64{10}, owner: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Poll: poll, Models: map[string]int64{"s": gib}}
			l := &Ledger{}
			if tc.beside {
				l.Learn(c, "comfyui", "wf", 12*gib, t0)
			}
			tc.start.Owner, tc.start.Engine = 1, "comfyui"
			l.JobBegins(c, tc.start)
			for i, used := range tc.readings {
				l.Take(c, Reading{Total: 24 * gib, Free: 24*gib - used*gib, At: t0.Add(time.Duration(i) * time.Millisecond)})
				if tc.beside && i == 0 {
					if _, ok := l.Beside(c, "s", t0); !ok {
						t.Fatal("s not admitted beside the job")
					}
				}
			}
			owner := tc.owner
			if owner == nil {
				owner = 1
			}
			learned := l.JobEnds(c, owner, t0.Add(time.Second))
			fp, _ := l.FootprintOf(c, "wf")
			if tc.beside {
				fp.Bytes -= 12 * gib // what it was learned at before
			}
			if learned != (tc.want != 0) || fp.Bytes != tc.want {
				t.Errorf("learned %v, %+v; want %d MiB", learned, fp, tc.want>>20)
			}
			if (l.Snapshot(c, t0).Job == nil) != (tc.owner == nil) {
				t.Errorf("job after its end: %+v", l.Snapshot(c, t0).Job)
			}
		})
	}
}

// A job's peak is the workflow's footprint, or what kept models were
// kept for; DropJob forgets it without learning.
func TestJobBegins(t *testing.T) {
	c := Config{Poll: poll, Models: map[string]int64{"wf": 8 * gib}}
	l := &Ledger{}
	l.Forget("comfyui", "bad", t0)
	for _, tc := range []struct {
		start JobStart
		peak  int64
	}{
		{JobStart{Workflow: "wf"}, 8 * gib},
		{JobStart{Workflow: "wf", KeptPeak: 5 * gib}, 5 * gib},
		{JobStart{Workflow: "never"}, 0},
		{JobStart{Workflow: "bad"}, 0},
		{JobStart{}, 0},
	} {
		tc.start.Owner = tc.start.Workflow
		l.JobBegins(c, tc.start)
		if j := l.Snapshot(c, t0).Job; j == nil || j.PeakBytes != tc.peak {
			t.Errorf("%+v: job %+v, want peak %d MiB", tc.start, j, tc.peak>>20)
		}
		l.DropJob("other")
		if l.Snapshot(c, t0).Job == nil {
			t.Error("DropJob dropped another owner's job")
		}
		l.DropJob(tc.start.Owner)
		if l.Snapshot(c, t0).Job != nil {
			t.Error("DropJob kept the job")
		}
	}
}

// Models stay loaded through a job only for a measured workflow, and only
// if they leave its peak free beside them, less the reserve and at least
// min_free_vram.
func TestKeep(t *testing.T) {
	l := &Ledger{}
	c := Config{Poll: poll, Models: map[string]int64{"wf": 8 * gib}}
	l.Learn(c, "comfyui", "learned", 6*gib, t0)
	l.Forget("comfyui", "oom", t0)
	for workflow, want := range map[string]int64{"wf": 8 * gib, "learned": 6 * gib, "oom": 0, "never": 0, "": 0} {
		if got := l.KeepPeak(c, workflow); got != want {
			t.Errorf("KeepPeak(%q) = %d MiB, want %d MiB", workflow, got>>20, want>>20)
		}
	}
	for _, tc := range []struct {
		free, reserve, minFree, peak int64
		fits                         bool
	}{
		{free: 20 * gib, peak: 8 * gib, fits: true},
		{free: 8 * gib, peak: 8 * gib, fits: true},
		{free: 8 * gib, reserve: 1, peak: 8 * gib},
		{free: 10 * gib, reserve: 2 * gib, peak: 8 * gib, fits: true},
		{free: 10 * gib, peak: 8 * gib, minFree: 10 * gib, fits: true},
		{free: 10 * gib, peak: 8 * gib, minFree: 11 * gib},
	} {
		if got := KeepFits(Config{Reserve: tc.reserve, MinFree: tc.minFree}, tc.free, tc.peak); got != tc.fits {
			t.Errorf("KeepFits(%+v) = %v, want %v", tc, got, tc.fits)
		}
	}
}

func TestCause(t *testing.T) {
	l, c := card{total: 24 * gib, free: 8 * gib, reserve: gib, models: map[string]int64{"m": 12 * gib}, alone: []string{"a"},
		resident: map[string]Resident{"i": {Engine: "ollama", VRAM: 2 * gib, Evicts: true}}}.build(t)
	for model, want := range map[string]string{
		"m": "too little free video memory for m (needs 12288 MiB, 9216 MiB available beyond vram_reserve)",
		"a": "too little free video memory for a (needs 23552 MiB, 9216 MiB available beyond vram_reserve)",
	} {
		if got := l.Cause(c, model, t0); got != want {
			t.Errorf("Cause(%s) = %q, want %q", model, got, want)
		}
	}
}

// While the reading is stale (vram_stale wait), the cause says so.
func TestCauseWhileStale(t *testing.T) {
	l, c := card{total: 24 * gib, free: 8 * gib, models: map[string]int64{"m": 4 * gib}}.build(t)
	want := "no fresh reading of the card's video memory (nvidia-smi's last is 4s old)"
	if got := l.Cause(c, "m", t0.Add(4*time.Second)); got != want {
		t.Errorf("Cause while stale = %q, want %q", got, want)
	}
	c.StaleAdmits = true
	if got := l.Cause(c, "m", t0.Add(4*time.Second)); strings.Contains(got, "fresh") {
		t.Errorf("Cause with vram_stale admit = %q, want the room's", got)
	}
	var none Ledger
	if got := none.Cause(Config{Poll: poll}, "m", t0); !strings.Contains(got, "no reading of the card's video memory yet") {
		t.Errorf("Cause with no reading = %q", got)
	}
}

// The status lists configured footprints first, then the learned, each
// by model; a model that runs alone shows the card less the reserve.
func TestSnapshotFootprints(t *testing.T) {
	l, c := card{total: 24 * gib, free: 24 * gib, reserve: gib, models: map[string]int64{"z": gib, "c": gib},
		learned: map[string]int64{"y": gib, "b": gib}, alone: []string{"a"}}.build(t)
	l.Restore(map[string]Footprint{"z": {Engine: "ollama", Model: "z", Bytes: 5 * gib}}) // configured since it was stored
	var got []string
	for _, fp := range l.Snapshot(c, t0).Footprints {
		got = append(got, fmt.Sprintf("%s:%s:%d:%v", fp.Source, fp.Model, fp.Bytes>>20, fp.Alone))
	}
	want := "[configured:c:1024:false configured:z:1024:false learned:a:23552:true learned:b:1024:false learned:y:1024:false]"
	if fmt.Sprint(got) != want {
		t.Errorf("footprints %v, want %s", got, want)
	}
}

// What is stored reads back; what was learned meanwhile is newer than
// what storage had; the table is capped.
func TestStoredFootprints(t *testing.T) {
	c := Config{Poll: poll}
	old := &Ledger{}
	old.Learn(c, "ollama", "m", 6*gib, t0)
	old.Learn(c, "ollama", "n", 2*gib, t0)
	old.Forget("ollama", "x", t0)
	fps, err := Decode(old.Encode())
	if err != nil || len(fps) != 3 || fps["m"].Bytes != 6*gib || !fps["x"].Alone {
		t.Fatalf("decoded %+v, %v", fps, err)
	}
	if _, err := Decode([]byte("{")); err == nil {
		t.Error("a broken table decoded")
	}
	if fps, _ := Decode([]byte(`{"footprints":[{"model":"","bytes":1},{"model":"z","bytes":0}]}`)); len(fps) != 0 {
		t.Errorf("entries that make no sense kept: %+v", fps)
	}
	l := &Ledger{}
	l.Learn(c, "ollama", "m", 7*gib, t0.Add(time.Second))
	l.Restore(fps)
	if fp, _ := l.FootprintOf(c, "m"); fp.Bytes != 7*gib {
		t.Errorf("m %+v, want the 7 GiB learned since", fp)
	}
	if fp, _ := l.FootprintOf(c, "n"); fp.Bytes != 2*gib {
		t.Errorf("n %+v, want the stored 2 GiB", fp)
	}
	for i := range MaxFootprints + 1 {
		l.Learn(c, "ollama", fmt.Sprint("k", i), gib, t0.Add(time.Duration(i+2)*time.Second))
	}
	if n := len(l.Snapshot(c, t0).Footprints); n != MaxFootprints {
		t.Errorf("%d footprints kept, want %d", n, MaxFootprints)
	}
	if _, ok := l.FootprintOf(c, "n"); ok {
		t.Error("the oldest footprint was kept past the cap")
	}
}
