package main

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

func TestGPUUseCountsLoadsEvictionsAndSwitches(t *testing.T) {
	ev := []gputest.Event{
		{Service: "ollama", What: "request /api/chat llama3.2"},
		{Service: "ollama", What: "load llama3.2:latest"},
		{Service: "ollama", What: "evict llama3.2:latest to make room for mistral:latest"},
		{Service: "ollama", What: "load mistral:latest"},
		{Service: "comfy", What: "queued p1"},
		{Service: "comfy", What: "job p1 start"},
		{Service: "comfy", What: "job p2 start"},
		{Service: "ollama", What: "load llama3.2:latest"},
	}
	cold, evictions, switches := gpuUse(ev)
	if cold != 3 || evictions != 1 || switches != 2 {
		t.Fatalf("cold %d, evictions %d, switches %d; want 3, 1, 2", cold, evictions, switches)
	}
}

func TestFleetDayIsSeeded(t *testing.T) {
	l := fleetLoad{length: 30 * time.Second, chatRate: 3, batchEvery: 10 * time.Second, jobMin: time.Second, job: 2 * time.Second}
	a, b := fleetDay(1, l), fleetDay(1, l)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed drew different days")
	}
	images := 0
	for i, e := range a {
		if i > 0 && e.at < a[i-1].at {
			t.Fatalf("arrival %d before the one ahead of it", i)
		}
		if e.image {
			images++
			if e.client == "" || e.dur < l.jobMin || e.dur >= l.jobMin+l.job {
				t.Fatalf("image job %+v", e)
			}
		}
	}
	if images == 0 || images == len(a) {
		t.Fatalf("%d image jobs of %d arrivals", images, len(a))
	}
}
