package main

import (
	"fmt"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// What the ab, pair and switch benchmarks share: listener URLs, request
// bodies, one half of a measured switch and its timeline checks.

// localURL is the base URL of a listener on loopback.
func localURL(port int) string { return fmt.Sprintf("http://127.0.0.1:%d", port) }

// chatBody is a one-message, non-streaming chat for model.
func chatBody(model string) string {
	return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"stream":false}`, model)
}

// comfyPrompts returns a maker of ComfyUI prompts, each with its own seed,
// or ComfyUI's cache would answer it.
func comfyPrompts() func() string {
	seed := 0
	return func() string {
		seed++
		return fmt.Sprintf(`{"prompt":{"3":{"class_type":"KSampler","inputs":{"seed":%d}},"9":{"class_type":"SaveImage"}}}`, seed)
	}
}

// switchHalf is one direction of a switch: a request to busyURL starts,
// settle waits until it holds the GPU, then a request to waitURL arrives
// and has to wait for it. It returns the GPU's timeline once both are
// answered, and the index at which this half began.
func switchHalf(gpu *gputest.GPU, busyURL, busyBody, waitURL, waitBody string, settle func(from int)) ([]gputest.Event, int, error) {
	from := len(gpu.Events())
	done := make(chan error, 1)
	go func() { _, err := post(busyURL, busyBody); done <- err }()
	settle(from)
	if _, err := post(waitURL, waitBody); err != nil {
		return nil, from, err
	}
	if err := <-done; err != nil {
		return nil, from, err
	}
	return gpu.Events(), from, nil
}

// incomplete is the error for a timeline that lacks a mark a measurement
// needs, with the timeline from the half's start.
func incomplete(ev []gputest.Event, from int) error {
	return fmt.Errorf("incomplete timeline:\n%s", gputest.Dump(ev[from:]))
}

// sortAll sorts each list, ready for percentile.
func sortAll(lists ...[]time.Duration) {
	for _, s := range lists {
		sortDurations(s)
	}
}
