package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// The fleet day's clients: a chat's wait is to the first byte of its
// streamed answer, an image job's to its start on a host's GPU, both
// from its arrival, the client's own retries of a refused request
// (after fleetRetryAfter) included.

// fleetRetryAfter is how long a client waits before it sends a refused
// request again (the hosts' busy_retry_after, scaled down).
const fleetRetryAfter = 100 * time.Millisecond

// fleetGiveUp is how long a client keeps retrying.
const fleetGiveUp = 2 * time.Minute

var fleetHTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: fleetGiveUp}

// fleetResult is one request's outcome.
type fleetResult struct {
	image   bool
	wait    time.Duration
	retries int
	err     error
}

// chat sends a streamed chat for model to front until a host answers it.
func fleetChat(front, model string, arrived time.Time) fleetResult {
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"stream":true}`, model)
	r := fleetResult{}
	for {
		resp, err := fleetHTTP.Post(front+"/api/chat", "application/json", strings.NewReader(body))
		if err == nil && resp.StatusCode == http.StatusOK {
			var one [1]byte
			_, err = io.ReadFull(resp.Body, one[:])
			r.wait = time.Since(arrived)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.err = err
			return r
		}
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("chat for %s: %s", model, resp.Status)
		}
		if time.Since(arrived) > fleetGiveUp {
			r.err = err
			return r
		}
		r.retries++
		time.Sleep(fleetRetryAfter)
	}
}

// fleetImage queues an image job through front, and waits for its start
// on the GPU of the host that took it.
func fleetImage(front string, a fleetArrival, seq int, gpus map[string]*gputest.GPU, arrived time.Time) fleetResult {
	body := fmt.Sprintf(`{"client_id":%q,"prompt":{"3":{"class_type":"KSampler","inputs":{"seed":%d,"model":["4",0]}},`+
		`"4":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":%q}},"9":{"class_type":"SaveImage","inputs":{"images":["3",0]}}},`+
		`"extra_data":{"fake_duration_ms":%d}}`, a.client, seq, fleetWorkflows[a.workflow], a.dur.Milliseconds())
	r := fleetResult{image: true}
	for {
		resp, err := fleetHTTP.Post(front+"/prompt", "application/json", strings.NewReader(body))
		if err == nil && resp.StatusCode == http.StatusOK {
			var out struct {
				PromptID string `json:"prompt_id"`
			}
			err = json.NewDecoder(resp.Body).Decode(&out)
			resp.Body.Close()
			gpu := gpus[resp.Header.Get("X-GPU-Host")]
			if err == nil && gpu == nil {
				err = fmt.Errorf("image job answered by unknown host %q", resp.Header.Get("X-GPU-Host"))
			}
			if err != nil {
				r.err = err
				return r
			}
			start := "job " + out.PromptID + " start"
			var at time.Time
			gpu.WaitFor(fleetGiveUp, func(ev []gputest.Event) bool {
				if i := gputest.Index(ev, 0, "comfy", start); i >= 0 {
					at = ev[i].At
					return true
				}
				return false
			})
			if at.IsZero() {
				r.err = fmt.Errorf("image job %s never started", out.PromptID)
			}
			r.wait = at.Sub(arrived)
			return r
		}
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("image job: %s", resp.Status)
		}
		if time.Since(arrived) > fleetGiveUp {
			r.err = err
			return r
		}
		r.retries++
		time.Sleep(fleetRetryAfter)
	}
}
