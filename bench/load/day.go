package main

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// The simulated day replays one seeded workload through three policies
// with the same cost model: the original program's (free and warm-up after
// every job); ours (a batch of image jobs keeps the GPU and ComfyUI's
// models between jobs; free and warm-up once at the end); and ours with
// co-residency (co_resident with vram_admission: a chat for the small
// co_resident model is served beside a render whose workflow was measured).
type dayEvent struct {
	at    time.Duration
	image bool          // an image job, else an LLM request
	dur   time.Duration // its run time on the GPU
	// workflow is an image job's workflow (a batch uses one); co, that an
	// LLM request names the co_resident model. Only the co-resident
	// policy reads them.
	workflow int
	co       bool
}

// The cost model, of the order of a consumer GPU with an 8B LLM and SDXL.
const (
	costOllamaLoad  = 4 * time.Second
	costOllamaUnld  = 1 * time.Second
	costComfyLoad   = 8 * time.Second
	costComfyFree   = 1 * time.Second
	llmRequestTime  = 6 * time.Second
	imageJobMinTime = 20 * time.Second
	// costBesideLoad is the co_resident model's cold load beside a render
	// (the LLM engines were emptied as the job began): an Ollama load. The
	// render is assumed not to slow down while a chat runs beside it.
	costBesideLoad = costOllamaLoad
)

// The card and the co-resident policy's sizes: an 8B chat model beside an
// SDXL workflow's measured peak on a 24 GiB card.
const (
	cardGiB         = 24
	coModelGiB      = 5
	workflowPeakGiB = 10
)

// dayWorkload is the seeded day. share is the part of the LLM requests
// that name the co_resident model, workflows how many distinct workflows
// the batches draw theirs from; both are drawn from streams of their own,
// so the day the first two policies see does not depend on them.
func dayWorkload(seed uint64, share float64, workflows int) []dayEvent {
	rng := rand.New(rand.NewPCG(seed, 1))
	wfRng := rand.New(rand.NewPCG(seed, 2))
	coRng := rand.New(rand.NewPCG(seed, 3))
	var ev []dayEvent
	// Chats and embeddings in the waking hours, ~1 per 4 minutes.
	for t := 7 * time.Hour; t < 23*time.Hour; t += time.Duration(rng.ExpFloat64() * float64(4*time.Minute)) {
		ev = append(ev, dayEvent{at: t, dur: llmRequestTime, co: coRng.Float64() < share})
	}
	// Eight image batches of 3 to 8 jobs, submitted together, each of one
	// workflow.
	for range 8 {
		start := 8*time.Hour + time.Duration(rng.Int64N(int64(14*time.Hour)))
		wf := wfRng.IntN(max(workflows, 1))
		for j := range 3 + rng.IntN(6) {
			ev = append(ev, dayEvent{at: start + time.Duration(j)*time.Second, image: true, workflow: wf,
				dur: imageJobMinTime + time.Duration(rng.Int64N(int64(40*time.Second)))})
		}
	}
	sort.Slice(ev, func(i, j int) bool { return ev[i].at < ev[j].at })
	return ev
}

// dayPolicy is how the simulated GPU is shared.
type dayPolicy struct {
	batch      bool // ours: a batch keeps the GPU (hand-over between its jobs)
	coResident bool // chats for the co_resident model beside measured renders
}

type dayStats struct {
	switches, coldLLM, coldComfy, frees, warmups int
	switching                                    time.Duration
	llmWait                                      time.Duration
	// The co-resident policy's: chats served beside a render, hand-overs
	// lost to a chat in flight at a job's end, and the next job's waits
	// for such chats to finish (drains).
	beside, lostHandovers, drains int
	drainTime                     time.Duration
	// Every chat's arrival and wait (to the start of its answer, its
	// model's load included), and every image job's hold of the GPU (from
	// its LLM unload to its render's end).
	chats   []chatWait
	renders [][2]time.Duration
	// What the predictions of starts are checked against (eta.go): each
	// image job's span, and when the GPU went back to LLM use.
	jobs    []jobSpan
	llmBack []time.Duration
}

type chatWait struct{ at, wait time.Duration }

// duringRenders are the waits of the chats that arrived while an image
// job held the GPU, sorted.
func (st dayStats) duringRenders() []time.Duration {
	chats := append([]chatWait(nil), st.chats...) // those served beside a render come first
	sort.SliceStable(chats, func(i, j int) bool { return chats[i].at < chats[j].at })
	var w []time.Duration
	r := 0
	for _, c := range chats {
		for r < len(st.renders) && st.renders[r][1] <= c.at {
			r++
		}
		if r < len(st.renders) && st.renders[r][0] <= c.at {
			w = append(w, c.wait)
		}
	}
	sortDurations(w)
	return w
}

// simulate serves the events in order on one GPU: image jobs have priority
// over waiting LLM requests (every policy), one thing at a time, but for
// the chats the co-resident policy serves beside a render.
func simulate(ev []dayEvent, p dayPolicy) dayStats {
	d := &day{dayPolicy: p, ollamaLoaded: true, owner: "llm", measured: map[int]bool{}}
	d.pending = append([]dayEvent(nil), ev...)
	for len(d.pending) > 0 {
		next := nextEvent(d.pending, d.now)
		e := d.pending[next]
		d.pending = append(d.pending[:next], d.pending[next+1:]...)
		if e.at > d.now {
			d.now = e.at
		}
		if e.image {
			d.image(e)
		} else {
			d.llm(e)
		}
	}
	return d.st
}

// day is the simulated GPU's state as the events are served.
type day struct {
	dayPolicy
	st                        dayStats
	pending                   []dayEvent // the events still to serve, in order of arrival
	now                       time.Duration
	ollamaLoaded, comfyLoaded bool
	owner                     string // "llm" or "image"
	// The co-resident policy's: the co_resident model alone loaded beside
	// a render; when the LLM requests served so far end (laneFree), and
	// those admitted beside a render (besideUntil); the workflows measured.
	coLoaded              bool
	laneFree, besideUntil time.Duration
	measured              map[int]bool
}

// nextEvent is the index of the next event to serve: the first arrived
// image job if any has arrived by now, else the earliest event.
func nextEvent(pending []dayEvent, now time.Duration) int {
	for i, e := range pending {
		if e.at > now && i > 0 {
			break
		}
		if e.image {
			return i
		}
	}
	return 0
}

// spend advances the clock by a switching cost.
func (d *day) spend(cost time.Duration) {
	d.now += cost
	d.st.switching += cost
}

// image serves an image job.
func (d *day) image(e dayEvent) {
	if d.besideUntil > d.now {
		// A drain: chats admitted beside the previous job are in flight.
		d.st.drains++
		d.st.drainTime += d.besideUntil - d.now
		d.now = d.besideUntil
	}
	hold := d.now
	if d.owner != "image" {
		d.st.switches++
		d.owner = "image"
	}
	// The co_resident model loaded beside an earlier render stays through
	// a job whose measured peak leaves room for it.
	fits := d.measured[e.workflow] && coModelGiB+workflowPeakGiB <= cardGiB
	keep := d.coResident && d.coLoaded && fits
	unloaded := d.ollamaLoaded || (d.coLoaded && !keep)
	if unloaded {
		d.spend(costOllamaUnld)
	}
	d.ollamaLoaded, d.coLoaded = false, keep
	sent := d.now
	freed := !d.comfyLoaded // a peak is learned only from a freed engine
	if !d.comfyLoaded {
		d.spend(costComfyLoad)
		d.st.coldComfy++
		d.comfyLoaded = true
	}
	end := d.now + e.dur
	if d.coResident && fits {
		d.serveBeside(sent, end)
	} else if d.coResident && freed {
		d.measured[e.workflow] = true // it ran alone from a freed engine
	}
	d.now = end
	d.st.renders = append(d.st.renders, [2]time.Duration{hold, end})
	d.st.jobs = append(d.st.jobs, jobSpan{at: e.at, granted: hold, ran: sent, end: end, workflow: e.workflow, unloaded: unloaded})
	moreImages := len(d.pending) > 0 && d.pending[0].image && d.pending[0].at <= d.now
	inFlight := d.laneFree > d.now
	if inFlight {
		d.besideUntil = d.laneFree
	}
	if d.batch && moreImages && !inFlight {
		return
	}
	// Free, then warm the LLM again.
	d.spend(costComfyFree)
	d.st.llmBack = append(d.st.llmBack, d.now)
	d.st.frees++
	d.comfyLoaded = false
	d.owner = "llm"
	d.st.switches++
	if d.batch && moreImages {
		// The hand-over is lost to a chat in flight: the GPU goes to LLM
		// use, and a job is waiting, so nothing is warmed.
		d.st.lostHandovers++
		return
	}
	d.spend(costOllamaLoad)
	d.st.warmups++
	d.ollamaLoaded = true
}

// serveBeside serves, beside a render sent at sent that ends at end, the
// chats for the co_resident model that are waiting or arrive before end:
// each is admitted as it arrives (once the job is sent), and the chats run
// one at a time, the first loading the model.
func (d *day) serveBeside(sent, end time.Duration) {
	kept := d.pending[:0]
	for _, c := range d.pending {
		if c.image || !c.co || c.at >= end {
			kept = append(kept, c)
			continue
		}
		start := max(c.at, sent, d.laneFree)
		if !d.coLoaded {
			start += costBesideLoad
			d.st.switching += costBesideLoad
			d.st.coldLLM++
			d.coLoaded = true
		}
		d.st.chats = append(d.st.chats, chatWait{c.at, start - c.at})
		d.st.beside++
		d.laneFree = start + c.dur
	}
	d.pending = kept
}

// llm serves an LLM request.
func (d *day) llm(e dayEvent) {
	if d.laneFree > d.now {
		d.now = d.laneFree // behind the chats served beside a render
	}
	if d.owner != "llm" {
		d.st.switches++
		d.owner = "llm"
	}
	d.st.llmWait += d.now - e.at
	if !d.ollamaLoaded && !(e.co && d.coLoaded) {
		d.spend(costOllamaLoad)
		d.st.coldLLM++
		d.ollamaLoaded = true
	}
	d.st.chats = append(d.st.chats, chatWait{e.at, d.now - e.at})
	d.now += e.dur
	d.laneFree = d.now
}

func runDay(args []string) error {
	fs := newFlags("day")
	seed := fs.Uint64("seed", 1, "workload seed")
	share := fs.Float64("coresident", 100, "percent of the LLM requests that name the co_resident model (the co-resident policy)")
	workflows := fs.Int("workflows", 3, "distinct workflows the image batches draw theirs from")
	fs.Parse(args)
	ev := dayWorkload(*seed, *share/100, *workflows)
	images, batches, co := 0, 0, 0
	seen := map[int]bool{}
	for i, e := range ev {
		if e.image {
			images++
			seen[e.workflow] = true
			if i == 0 || !ev[i-1].image || e.at-ev[i-1].at > time.Minute {
				batches++
			}
		} else if e.co {
			co++
		}
	}
	fmt.Printf("Simulated day (seed %d): %d LLM requests (%d for the co_resident model), %d image jobs in %d batches of %d workflows\n",
		*seed, len(ev)-images, co, images, batches, len(seen))
	policies := []struct {
		name string
		p    dayPolicy
	}{
		{"original (free + warm after each job)", dayPolicy{}},
		{"gpu_turnstile (hand-over in batches)", dayPolicy{batch: true}},
		{"gpu_turnstile + co_resident", dayPolicy{batch: true, coResident: true}},
	}
	stats := make([]dayStats, len(policies))
	for i, p := range policies {
		stats[i] = simulate(ev, p.p)
	}
	fmt.Printf("%-38s %9s %9s %12s %6s %8s %14s %9s %12s\n", "policy", "switches", "cold LLM", "cold ComfyUI", "frees", "warm-ups", "time switching", "lost h-o", "drains")
	for i, p := range policies {
		st := stats[i]
		fmt.Printf("%-38s %9d %9d %12d %6d %8d %14v %9d %12s\n", p.name, st.switches, st.coldLLM, st.coldComfy, st.frees, st.warmups, st.switching,
			st.lostHandovers, fmt.Sprintf("%d, %v", st.drains, st.drainTime.Round(100*time.Millisecond)))
	}
	fmt.Printf("\nChats that arrived while an image job held the GPU (wait: to the start of the answer, loads included)\n")
	fmt.Printf("%-38s %6s %8s %8s %8s %7s\n", "policy", "chats", "median", "p95", "longest", "beside")
	for i, p := range policies {
		w := stats[i].duringRenders()
		r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
		fmt.Printf("%-38s %6d %8v %8v %8v %7d\n", p.name, len(w), r(percentile(w, 0.5)), r(percentile(w, 0.95)), r(percentile(w, 1)), stats[i].beside)
	}
	errs, rel, unknown := predictionErrors(ev, stats[1])
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	pc := func(d time.Duration) string { return fmt.Sprintf("%d %%", (int64(d)+5)/10) }
	fmt.Printf("\nPredicted starts (%s): %d waiters predicted, %d not (nothing measured yet)\n", policies[1].name, len(errs), unknown)
	fmt.Printf("error: median %v, p95 %v, largest %v; of the wait: median %s, p95 %s\n",
		r(percentile(errs, 0.5)), r(percentile(errs, 0.95)), r(percentile(errs, 1)), pc(percentile(rel, 0.5)), pc(percentile(rel, 0.95)))
	return nil
}
