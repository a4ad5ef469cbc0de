package httpapi

import (
	"encoding/json"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// PublicHistory is the recent history as the public view shows it: the
// state changes, the image jobs without their prompt_id, and the timed
// steps without their detail (an interrupt's detail is a prompt_id).
type PublicHistory struct {
	Transitions []gpu.TransitionEntry `json:"transitions"`
	Jobs        []PublicJobEntry      `json:"jobs"`
	Events      []PublicStepEntry     `json:"events"`
}

// PublicJobEntry is a finished image job without its prompt_id.
type PublicJobEntry struct {
	Engine  string    `json:"engine,omitempty"`
	Source  string    `json:"source"`
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	Outcome string    `json:"outcome"`
}

// PublicStepEntry is a timed step (unload, free, wake, warm, prepare,
// interrupt) without its detail.
type PublicStepEntry struct {
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"`
	Seconds float64   `json:"seconds"`
}

// PublicHistoryOf is the public view of h.
func PublicHistoryOf(h gpu.HistoryView) PublicHistory {
	return PublicHistory{Transitions: h.Transitions, Jobs: mapSlice(h.Jobs, publicJobEntry), Events: mapSlice(h.Events, publicStep)}
}

func publicJobEntry(j gpu.JobEntry) PublicJobEntry {
	return PublicJobEntry{Engine: j.Engine, Source: j.Source, Started: j.Started, Seconds: j.Seconds, Outcome: j.Outcome}
}

func publicStep(e gpu.EventEntry) PublicStepEntry {
	return PublicStepEntry{At: e.At, Kind: e.Kind, Seconds: e.Seconds}
}

// publicStepEvent and publicJobEvent are the data of the public view's
// step and job events.
type (
	publicStepEvent struct {
		Turnstile string `json:"turnstile"`
		PublicStepEntry
	}
	publicJobEvent struct {
		Turnstile string `json:"turnstile"`
		PublicJobEntry
	}
)

// fullStatusJSON reads a status event's data without its learned
// figures, which the public view drops anyway.
type fullStatusJSON struct {
	Status
	Learned json.RawMessage `json:"learned"`
}

// publicEvent is ev as the public view shows it, with t's public
// warnings now; false for an event it does not show (one of a name it
// does not know: private until it is given a public form here).
func publicEvent(ev gpu.Event, t Turnstile) (gpu.Event, bool, error) {
	var v any
	switch ev.Name {
	case "status":
		var st fullStatusJSON
		if err := json.Unmarshal(ev.Data, &st); err != nil {
			return ev, false, err
		}
		st.PublicWarnings = t.Config.Facts().PublicWarnings
		v = Public(st.Status)
	case "step":
		var e gpu.StepEvent
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			return ev, false, err
		}
		v = publicStepEvent{Turnstile: e.Turnstile, PublicStepEntry: publicStep(e.EventEntry)}
	case "job":
		var e gpu.JobEvent
		if err := json.Unmarshal(ev.Data, &e); err != nil {
			return ev, false, err
		}
		v = publicJobEvent{Turnstile: e.Turnstile, PublicJobEntry: publicJobEntry(e.JobEntry)}
	default:
		return ev, false, nil
	}
	data, err := json.Marshal(v)
	return gpu.Event{Name: ev.Name, Data: data}, err == nil, err
}
