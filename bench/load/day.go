package main

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"time"
)

// The simulated day replays one seeded workload through two policies with
// the same cost model: ours (a batch of image jobs keeps the GPU and
// ComfyUI's models between jobs; free and warm-up once at the end) and the
// original program's (free and warm-up after every job).
type dayEvent struct {
	at    time.Duration
	image bool          // an image job, else an LLM request
	dur   time.Duration // its run time on the GPU
}

// The cost model, of the order of a consumer GPU with an 8B LLM and SDXL.
const (
	costOllamaLoad  = 4 * time.Second
	costOllamaUnld  = 1 * time.Second
	costComfyLoad   = 8 * time.Second
	costComfyFree   = 1 * time.Second
	llmRequestTime  = 6 * time.Second
	imageJobMinTime = 20 * time.Second
)

func dayWorkload(seed uint64) []dayEvent {
	rng := rand.New(rand.NewPCG(seed, 1))
	var ev []dayEvent
	// Chats and embeddings in the waking hours, ~1 per 4 minutes.
	for t := 7 * time.Hour; t < 23*time.Hour; t += time.Duration(rng.ExpFloat64() * float64(4*time.Minute)) {
		ev = append(ev, dayEvent{at: t, dur: llmRequestTime})
	}
	// Eight image batches of 3 to 8 jobs, submitted together.
	for range 8 {
		start := 8*time.Hour + time.Duration(rng.Int64N(int64(14*time.Hour)))
		for j := range 3 + rng.IntN(6) {
			ev = append(ev, dayEvent{at: start + time.Duration(j)*time.Second, image: true,
				dur: imageJobMinTime + time.Duration(rng.Int64N(int64(40*time.Second)))})
		}
	}
	sort.Slice(ev, func(i, j int) bool { return ev[i].at < ev[j].at })
	return ev
}

type dayStats struct {
	switches, coldLLM, coldComfy, frees, warmups int
	switching                                    time.Duration
	llmWait                                      time.Duration
}

// simulate serves the events in order on one GPU: image jobs have priority
// over waiting LLM requests (both policies), one thing at a time.
func simulate(ev []dayEvent, batch bool) dayStats {
	d := &day{batch: batch, ollamaLoaded: true, owner: "llm"}
	pending := append([]dayEvent(nil), ev...)
	for len(pending) > 0 {
		next := nextEvent(pending, d.now)
		e := pending[next]
		pending = append(pending[:next], pending[next+1:]...)
		if e.at > d.now {
			d.now = e.at
		}
		if e.image {
			d.image(e, pending)
		} else {
			d.llm(e)
		}
	}
	return d.st
}

// day is the simulated GPU's state as the events are served.
type day struct {
	batch                     bool // ours: a batch keeps the GPU
	st                        dayStats
	now                       time.Duration
	ollamaLoaded, comfyLoaded bool
	owner                     string // "llm" or "image"
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

// image serves an image job; pending are the events still to serve.
func (d *day) image(e dayEvent, pending []dayEvent) {
	if d.owner != "image" {
		d.st.switches++
		d.owner = "image"
	}
	if d.ollamaLoaded {
		d.spend(costOllamaUnld)
		d.ollamaLoaded = false
	}
	if !d.comfyLoaded {
		d.spend(costComfyLoad)
		d.st.coldComfy++
		d.comfyLoaded = true
	}
	d.now += e.dur
	moreImages := len(pending) > 0 && pending[0].image && pending[0].at <= d.now
	if d.batch && moreImages {
		return
	}
	// Free, then warm the LLM again.
	d.spend(costComfyFree)
	d.st.frees++
	d.comfyLoaded = false
	d.spend(costOllamaLoad)
	d.st.warmups++
	d.ollamaLoaded = true
	d.owner = "llm"
	d.st.switches++
}

// llm serves an LLM request.
func (d *day) llm(e dayEvent) {
	if d.owner != "llm" {
		d.st.switches++
		d.owner = "llm"
	}
	d.st.llmWait += d.now - e.at
	if !d.ollamaLoaded {
		d.spend(costOllamaLoad)
		d.st.coldLLM++
		d.ollamaLoaded = true
	}
	d.now += e.dur
}

func runDay(args []string) error {
	fs := newFlags("day")
	seed := fs.Uint64("seed", 1, "workload seed")
	fs.Parse(args)
	ev := dayWorkload(*seed)
	images, batches := 0, 0
	for i, e := range ev {
		if e.image {
			images++
			if i == 0 || !ev[i-1].image || e.at-ev[i-1].at > time.Minute {
				batches++
			}
		}
	}
	fmt.Printf("Simulated day (seed %d): %d LLM requests, %d image jobs in %d batches\n", *seed, len(ev)-images, images, batches)
	fmt.Printf("%-36s %9s %9s %11s %6s %8s %14s\n", "policy", "switches", "cold LLM", "cold ComfyUI", "frees", "warm-ups", "time switching")
	for _, p := range []struct {
		name  string
		batch bool
	}{{"original (free + warm after each job)", false}, {"gpu_turnstile (hand-over in batches)", true}} {
		st := simulate(ev, p.batch)
		fmt.Printf("%-36s %9d %9d %11d %6d %8d %14v\n", p.name, st.switches, st.coldLLM, st.coldComfy, st.frees, st.warmups, st.switching)
	}
	return nil
}
