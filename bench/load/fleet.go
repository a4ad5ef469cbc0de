package main

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// The fleet day (issue #38): the same seeded arrivals, chats over several
// models and image jobs of two workflows, sent through a front tier to N
// GPU hosts, once per front policy; what each costs the hosts' GPUs (cold
// model loads, switches between LLM and image use) and the clients (chat
// and image waits).

// fleetStats is one policy's run.
type fleetStats struct {
	cold, switches  int
	evictions       int             // loads that made room by unloading another model
	chats, images   []time.Duration // waits, sorted
	retries, failed int
	firstErr        error
}

func runFleet(args []string) error {
	fs := newFlags("fleet")
	n := fs.Int("hosts", 3, "GPU hosts")
	seed := fs.Uint64("seed", 1, "arrivals seed")
	length := fs.Duration("length", 60*time.Second, "length of the (scaled) day")
	chatRate := fs.Float64("chats", 3, "chats per second")
	batchEvery := fs.Duration("batches", 20*time.Second, "mean time between image batches")
	only := fs.String("policy", "", "run only the policy of this name")
	fs.BoolVar(&fleetTimeline, "timeline", false, "print each host's model loads, evictions and image jobs")
	fs.Parse(args)
	load := fleetLoad{length: *length, chatRate: *chatRate, batchEvery: *batchEvery, jobMin: time.Second, job: 2 * time.Second}
	// A tenth of a real day's costs: a 2 s model load, 6 GiB models on a
	// 16 GiB card.
	costs := fleetCosts{load: 200 * time.Millisecond, unload: 50 * time.Millisecond, free: 50 * time.Millisecond, tokens: 10, tokenDelay: 10 * time.Millisecond}
	day := fleetDay(*seed, load)
	chats, jobs := 0, 0
	for _, a := range day {
		if a.image {
			jobs++
		} else {
			chats++
		}
	}
	fmt.Printf("Fleet day (seed %d): %d hosts, %v, %d chats over %d models, %d image jobs of %d workflows; model load %v\n",
		*seed, *n, *length, chats, len(fleetModels), jobs, len(fleetWorkflows), costs.load)
	fmt.Printf("%-26s %6s %7s %9s %12s %10s %13s %11s %8s %7s\n", "policy", "cold", "evicts", "switches", "chat median", "chat p95", "image median", "image p95", "retries", "failed")
	for _, p := range fleetPolicies {
		if *only != "" && p.name != *only {
			continue
		}
		st, err := fleetRun(*n, p, costs, day)
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		r := func(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }
		fmt.Printf("%-26s %6d %7d %9d %12s %10s %13s %11s %8d %7d\n", p.name, st.cold, st.evictions, st.switches,
			r(percentile(st.chats, 0.5)), r(percentile(st.chats, 0.95)), r(percentile(st.images, 0.5)), r(percentile(st.images, 0.95)), st.retries, st.failed)
		if st.firstErr != nil {
			fmt.Printf("  first failure: %v\n", st.firstErr)
		}
	}
	return nil
}

// fleetRun serves the day through p's front to n fresh hosts.
func fleetRun(n int, p fleetPolicy, costs fleetCosts, day []fleetArrival) (fleetStats, error) {
	hosts := make([]*fleetHost, n)
	gpus := map[string]*gputest.GPU{}
	for i := range hosts {
		hosts[i] = startFleetHost(fmt.Sprintf("gpu%d", i+1), costs)
		gpus[hosts[i].name] = hosts[i].gpu
		defer hosts[i].close()
	}
	llmPort, imagePort := freePort(), freePort()
	if err := loadCaddy(fleetCaddyfile(hosts, p, llmPort, imagePort)); err != nil {
		return fleetStats{}, err
	}
	defer caddy.Stop()
	// Let health checks and status streams see the hosts once.
	time.Sleep(500 * time.Millisecond)
	results := make([]fleetResult, len(day))
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range day {
		time.Sleep(time.Until(start.Add(a.at)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			arrived := start.Add(a.at)
			if a.image {
				results[i] = fleetImage(localURL(imagePort), a, i, gpus, arrived)
			} else {
				results[i] = fleetChat(localURL(llmPort), a.model, arrived)
			}
		}()
	}
	wg.Wait()
	st := fleetStats{}
	for _, r := range results {
		st.retries += r.retries
		switch {
		case r.err != nil:
			st.failed++
			if st.firstErr == nil {
				st.firstErr = r.err
			}
		case r.image:
			st.images = append(st.images, r.wait)
		default:
			st.chats = append(st.chats, r.wait)
		}
	}
	sortAll(st.chats, st.images)
	for _, h := range hosts {
		if fleetTimeline {
			printTimeline(h, start)
		}
		cold, evictions, switches := gpuUse(h.gpu.Events())
		st.cold += cold
		st.evictions += evictions
		st.switches += switches
	}
	return st, nil
}

// fleetTimeline is the -timeline flag.
var fleetTimeline bool

// printTimeline prints what happened on h's GPU that gpuUse counts, in
// seconds from start.
func printTimeline(h *fleetHost, start time.Time) {
	for _, e := range h.gpu.Events() {
		w := e.What
		if strings.HasPrefix(w, "load ") || strings.HasPrefix(w, "evict ") || strings.HasPrefix(w, "job ") {
			fmt.Printf("%s %7.2f %-6s %s\n", h.name, e.At.Sub(start).Seconds(), e.Service, w)
		}
	}
}

// gpuUse counts, on one GPU's timeline, the model loads, the models
// evicted to make room for one, and the changes between LLM use (a model
// load) and image use (a job's start).
func gpuUse(ev []gputest.Event) (cold, evictions, switches int) {
	use := ""
	for _, e := range ev {
		now := ""
		switch {
		case e.Service == "ollama" && strings.HasPrefix(e.What, "evict "):
			evictions++
			continue
		case e.Service == "ollama" && strings.HasPrefix(e.What, "load "):
			cold++
			now = "llm"
		case e.Service == "comfy" && strings.HasPrefix(e.What, "job ") && strings.HasSuffix(e.What, " start"):
			now = "image"
		default:
			continue
		}
		if use != "" && now != use {
			switches++
		}
		use = now
	}
	return cold, evictions, switches
}
