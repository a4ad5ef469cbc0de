package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds/kindstest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// fakeEngine is a simulated engine for the switch benchmark: its kind and
// the registry's fake of it, whose marks say when a request reached it and
// when its work ended.
type fakeEngine struct {
	kind string
	engine.Fake
}

// The delays of the pairs' simulated engines, a tenth of real ones or so;
// the benchmark subtracts the engines' own work. (vLLM's wake takes as
// long as its sleep.)
var (
	pairLLM   = engine.FakeOptions{Load: 30 * time.Millisecond, Wake: 80 * time.Millisecond, Unload: 80 * time.Millisecond, Tokens: 3, TokenDelay: 5 * time.Millisecond}
	pairImage = engine.FakeOptions{Job: 150 * time.Millisecond, Load: 40 * time.Millisecond, Unload: 40 * time.Millisecond}
)

// startFake starts the registry's fake of kind, with the pairs' delays.
func startFake(gpu *gputest.GPU, kind string) (fakeEngine, error) {
	k, ok := kinds.Named(kind)
	if !ok {
		return fakeEngine{}, fmt.Errorf("no engine kind %q", kind)
	}
	opts := pairLLM
	if k.Class == engine.ClassImage {
		opts = pairImage
	}
	f, ok := kindstest.Start(kind, gpu, opts)
	if !ok {
		return fakeEngine{}, fmt.Errorf("no simulated engine of kind %q", kind)
	}
	return fakeEngine{kind: kind, Fake: f}, nil
}

// body is the body of a request that uses the GPU: a chat, or a job.
func (e fakeEngine) body() string {
	if e.ChatPath != "" {
		return chatBody(e.ChatModel)
	}
	return e.Job()
}

// path is the route of that request.
func (e fakeEngine) path() string { return e.ChatPath + e.JobPath }

// pairResult is one engine pair's switch overheads.
type pairResult struct {
	toLLM, toImage, llmWork, imageWork []time.Duration
}

// pairRig is one engine pair on a simulated GPU behind a turnstile.
type pairRig struct {
	gpu                        *gputest.GPU
	llm, img                   fakeEngine
	adminURL, llmURL, imageURL string
}

// runPair measures n switches each way between an LLM engine and an image
// engine on one turnstile: from the end of one side's work to the other
// side's request reaching its engine, minus the steps in between (unload,
// free, wake) as the turnstile timed them.
func runPair(llmKind, imageKind string, n int) (pairResult, error) {
	var res pairResult
	rig, stop, err := startPair(llmKind, imageKind)
	if err != nil {
		return res, err
	}
	defer stop()
	waitIdle(rig.adminURL)
	for range n {
		overhead, work, err := rig.toLLM()
		if err != nil {
			return res, err
		}
		res.imageWork = append(res.imageWork, work)
		res.toLLM = append(res.toLLM, overhead)

		overhead, work, err = rig.toImage()
		if err != nil {
			return res, err
		}
		res.llmWork = append(res.llmWork, work)
		res.toImage = append(res.toImage, overhead)
		waitIdle(rig.adminURL)
	}
	return res, nil
}

// startPair starts the two simulated engines and a Caddy in front of them;
// stop closes the engines.
func startPair(llmKind, imageKind string) (rig pairRig, stop func(), err error) {
	rig.gpu = gputest.New()
	rig.gpu.ShareAmong(kindstest.LLMServices()...)
	if rig.llm, err = startFake(rig.gpu, llmKind); err != nil {
		return rig, nil, err
	}
	if rig.img, err = startFake(rig.gpu, imageKind); err != nil {
		rig.llm.Close()
		return rig, nil, err
	}
	stop = func() { rig.img.Close(); rig.llm.Close() }
	admin, pl, pi := freePort(), freePort(), freePort()
	if err := loadCaddy(pairConfig(admin, pl, pi, rig.llm, rig.img)); err != nil {
		stop()
		return rig, nil, err
	}
	rig.adminURL = localURL(admin)
	rig.llmURL, rig.imageURL = localURL(pl)+rig.llm.path(), localURL(pi)+rig.img.path()
	return rig, stop, nil
}

// pairConfig is the Caddyfile for a pair: the LLM engine's listener on pl,
// the image engine's on pi, one turnstile over both, polling fast enough
// not to dominate what is measured.
func pairConfig(admin, pl, pi int, llm, img fakeEngine) string {
	return fmt.Sprintf(`{`+globalOpts+`
	gpu_turnstile {
		llm %s %s
		image %s %s
		unload_poll_interval 20ms
		history_poll_interval 20ms
	}
}
:%d {
	bind 127.0.0.1
	gpu_turnstile
	reverse_proxy %s {
		flush_interval -1
	}
}
:%d {
	bind 127.0.0.1
	gpu_turnstile
	reverse_proxy %s
}
`, admin, llm.kind, llm.URL, img.kind, img.URL, pl, llm.URL, pi, img.URL)
}

// toLLM is the image -> LLM half: a chat arrives during a job and waits.
// It returns the switch's overhead and the free and wake it excludes.
func (r pairRig) toLLM() (overhead, work time.Duration, err error) {
	ev, from, err := switchHalf(r.gpu, r.imageURL, r.img.body(), r.llmURL, r.llm.body(), func(from int) {
		r.gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, from, r.img.Service, r.img.Marks.Arrived) >= 0 })
	})
	if err != nil {
		return 0, 0, err
	}
	end, i := at(ev, from, r.img.Service, r.img.Marks.Ended)
	reached, _ := at(ev, i, r.llm.Service, r.llm.Marks.Arrived)
	if end.IsZero() || reached.IsZero() {
		return 0, 0, incomplete(ev, from)
	}
	work = steps(r.adminURL, end, reached, "free", "wake")
	return reached.Sub(end) - work, work, nil
}

// toImage is the LLM -> image half: a prompt arrives during a chat and
// waits. It returns the switch's overhead and the unload, free and prepare
// it excludes.
func (r pairRig) toImage() (overhead, work time.Duration, err error) {
	busy := r.llm.Marks.BusyMark() // the model may be loaded already
	ev, from, err := switchHalf(r.gpu, r.llmURL, r.llm.body(), r.imageURL, r.img.body(), func(from int) {
		r.gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, from, r.llm.Service, busy) >= 0 })
	})
	if err != nil {
		return 0, 0, err
	}
	chatEnd, i := at(ev, from, r.llm.Service, r.llm.Marks.Ended)
	arrived, _ := at(ev, i, r.img.Service, r.img.Marks.Arrived)
	if chatEnd.IsZero() || arrived.IsZero() {
		return 0, 0, incomplete(ev, from)
	}
	work = steps(r.adminURL, chatEnd, arrived, "unload", "free", "prepare")
	return arrived.Sub(chatEnd) - work, work, nil
}

// steps sums the durations of the turnstile's steps of the given kinds
// that ended between from and to, from its history.
func steps(admin string, from, to time.Time, kinds ...string) time.Duration {
	resp, err := http.Get(admin + "/gpu_turnstile/history")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var h struct {
		Events []struct {
			At      time.Time `json:"at"`
			Kind    string    `json:"kind"`
			Seconds float64   `json:"seconds"`
		} `json:"events"`
	}
	json.NewDecoder(resp.Body).Decode(&h)
	var sum time.Duration
	for _, e := range h.Events {
		for _, k := range kinds {
			if e.Kind == k && !e.At.Before(from) && !e.At.After(to) {
				sum += time.Duration(e.Seconds * float64(time.Second))
			}
		}
	}
	return sum
}

// waitIdle waits until the default turnstile is idle with nothing waiting.
func waitIdle(admin string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		resp, err := http.Get(admin + "/gpu_turnstile/status")
		if err == nil {
			var st struct { // the default turnstile's first fields, at the top level
				State   string `json:"state"`
				Pending bool   `json:"image_pending"`
			}
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if st.State == "idle" && !st.Pending {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runPairs measures every pair of the given kinds.
func runPairs(llms, images []string, n int) error {
	fmt.Printf("Switch latency per engine pair over %d switches each way (simulated engines; their own steps, as the turnstile timed them, excluded)\n", n)
	fmt.Printf("%-22s %28s %28s %12s %16s\n", "pair (llm + image)", "image job end -> chat (med/p90)", "chat end -> image job (med/p90)", "free+wake", "unload+prepare")
	for _, l := range llms {
		for _, i := range images {
			r, err := runPair(l, i, n)
			if err != nil {
				return fmt.Errorf("%s + %s: %v", l, i, err)
			}
			sortAll(r.toLLM, r.toImage, r.llmWork, r.imageWork)
			fmt.Printf("%-22s %28s %28s %12s %16s\n", l+" + "+i,
				ms(percentile(r.toLLM, .5))+" / "+ms(percentile(r.toLLM, .9)),
				ms(percentile(r.toImage, .5))+" / "+ms(percentile(r.toImage, .9)),
				ms(percentile(r.imageWork, .5)), ms(percentile(r.llmWork, .5)))
		}
	}
	return nil
}

// splitKinds splits a comma-separated list of engine kinds.
func splitKinds(s string) []string { return strings.Split(s, ",") }
