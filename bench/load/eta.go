package main

import (
	"fmt"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/eta"
)

// jobSpan is one image job of the simulated day: when it arrived, had
// the GPU, was sent (the LLM engine emptied) and ended, and whether the
// LLM engine was unloaded for it.
type jobSpan struct {
	at, granted, ran, end time.Duration
	workflow              int
	unloaded              bool
}

// dayStart anchors the simulated day's offsets to a time.
var dayStart = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// predictionErrors checks package eta's predictions against a simulated
// day: for each request that waits for the GPU (an image job granted
// after it arrived; an LLM request that arrived while image work held or
// waited for it), the start predicted when it began to wait, from what
// had been measured by then, against when it started (an LLM request:
// when the GPU went back to LLM use). It returns the absolute errors of
// the waiters whose start could be predicted, the same as a part of
// each one's wait (in per mille, as durations for percentile), and how
// many could not be predicted.
func predictionErrors(ev []dayEvent, st dayStats) (errs, rel []time.Duration, unknown int) {
	check := func(at time.Duration, self int, start time.Duration) {
		s, l, idx := situationAt(st, at, self)
		p := eta.Predict(l, s)
		pl := p.LLM
		if self >= 0 {
			pl = p.Queue[idx]
		}
		if !pl.Known() {
			unknown++
			return
		}
		e := (pl.Start.Sub(dayStart) - start).Abs()
		errs = append(errs, e)
		rel = append(rel, time.Duration(1000*e/max(start-at, time.Second)))
	}
	for i, j := range st.jobs {
		if j.granted > j.at {
			check(j.at, i, j.granted)
		}
	}
	for _, e := range ev {
		if e.image || !imageBusy(st, e.at) {
			continue
		}
		for _, back := range st.llmBack {
			if back >= e.at {
				check(e.at, -1, back)
				break
			}
		}
	}
	sortDurations(errs)
	sortDurations(rel)
	return errs, rel, unknown
}

// imageBusy reports whether image work holds or waits for the GPU at at.
func imageBusy(st dayStats, at time.Duration) bool {
	for _, j := range st.jobs {
		if j.at <= at && at < j.end {
			return true
		}
	}
	for _, back := range st.llmBack {
		if back-costComfyFree <= at && at < back {
			return true
		}
	}
	return false
}

// situationAt is what the turnstile would know at at: the GPU and its
// queue (the image job self, if not negative, among the waiters, at
// index idx of the queue; else an LLM request waits) and the figures
// measured before.
func situationAt(st dayStats, at time.Duration, self int) (eta.Situation, *eta.Learned, int) {
	l := &eta.Learned{}
	s := eta.Situation{Now: dayStart.Add(at), LLMs: []eta.LLMEngine{{Name: "ollama", Loaded: true}}, LLMWaiting: self < 0}
	idx := -1
	for i, j := range st.jobs {
		switch {
		case j.end <= at:
			l.AddJob(fmt.Sprint(j.workflow), j.end-j.ran)
			if j.unloaded {
				l.AddStep("ollama", eta.Unload, costOllamaUnld)
			}
		case j.granted <= at:
			s.Holder = eta.Holder{Kind: eta.Job, Engine: "comfyui", Workflow: fmt.Sprint(j.workflow), Started: dayStart.Add(j.granted)}
			if j.ran <= at {
				s.Holder.Ran = dayStart.Add(j.ran)
			}
			s.LLMs[0].Loaded = false
		case j.at <= at || i == self:
			if i == self {
				idx = len(s.Queue)
			}
			s.Queue = append(s.Queue, eta.Waiter{Kind: eta.Job, Engine: "comfyui", Workflow: fmt.Sprint(j.workflow)})
		}
	}
	for _, back := range st.llmBack {
		switch {
		case back <= at:
			l.AddStep("comfyui", eta.Free, costComfyFree)
		case back-costComfyFree <= at && s.Holder.Kind == eta.None:
			s.Freeing, s.OwesFree = true, []string{"comfyui"}
			s.LLMs[0].Loaded = false
		}
	}
	return s, l, idx
}
