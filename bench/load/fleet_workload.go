package main

import (
	"math/rand/v2"
	"sort"
	"time"
)

// The fleet day's arrivals, in the run's own (scaled) time: chats over
// several models, most for the first, and batches of image jobs, each
// batch one client's and of one of two workflows. The same seed gives
// the same arrivals to every policy.

// fleetModels are the chat models, most requested first.
var fleetModels = []string{"llama3.2", "qwen3:8b", "mistral", "gemma3"}

// fleetModelWeights is each model's share of the chats.
var fleetModelWeights = []float64{0.4, 0.3, 0.2, 0.1}

// fleetWorkflows are the two workflows' checkpoints: a job's workflow
// signature is made of its model names.
var fleetWorkflows = []string{"sd_xl_base_1.0.safetensors", "flux1-dev.safetensors"}

// fleetArrival is one request of the day.
type fleetArrival struct {
	at       time.Duration
	image    bool
	model    string        // a chat's
	workflow int           // an image job's
	client   string        // an image job's client_id (one per batch)
	dur      time.Duration // an image job's run time
}

// fleetLoad is what the arrivals are drawn from.
type fleetLoad struct {
	length      time.Duration // of the day, scaled
	chatRate    float64       // chats per second
	batchEvery  time.Duration // mean time between image batches
	jobMin, job time.Duration // an image job runs jobMin + [0, job)
}

// fleetDay draws the seeded arrivals.
func fleetDay(seed uint64, l fleetLoad) []fleetArrival {
	rng := rand.New(rand.NewPCG(seed, 38))
	var ev []fleetArrival
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() * float64(time.Second) / l.chatRate)
		if t >= l.length {
			break
		}
		ev = append(ev, fleetArrival{at: t, model: pickModel(rng.Float64())})
	}
	batch := 0
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() * float64(l.batchEvery))
		if t >= l.length {
			break
		}
		batch++
		wf := rng.IntN(len(fleetWorkflows))
		for j := range 2 + rng.IntN(4) {
			ev = append(ev, fleetArrival{at: t + time.Duration(j)*10*time.Millisecond, image: true, workflow: wf,
				client: clientName(batch), dur: l.jobMin + time.Duration(rng.Int64N(int64(l.job)))})
		}
	}
	sort.SliceStable(ev, func(i, j int) bool { return ev[i].at < ev[j].at })
	return ev
}

func pickModel(u float64) string {
	for i, w := range fleetModelWeights {
		if u < w {
			return fleetModels[i]
		}
		u -= w
	}
	return fleetModels[len(fleetModels)-1]
}

func clientName(batch int) string {
	return "batch-" + string(rune('a'+batch%26)) + string(rune('a'+batch/26%26))
}
