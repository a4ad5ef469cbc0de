package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// simulated starts the fakes and a Caddy in front of them; it returns the
// two listeners' base URLs and the admin URL.
func simulated(gpu *gputest.GPU, oopts ollamatest.Options, copts comfytest.Options, settings string) (*ollamatest.Server, *comfytest.Server, string, string, string, error) {
	oll := ollamatest.NewServer(gpu, oopts)
	cmf := comfytest.NewServer(gpu, copts)
	admin, pl, pi := freePort(), freePort(), freePort()
	cfg := fmt.Sprintf(`{`+globalOpts+`
	gpu_turnstile {
		ollama %s
		comfy %s
		%s
	}
}
:%d {
	bind 127.0.0.1
	handle /healthz {
		gpu_turnstile_status
	}
	gpu_turnstile
	reverse_proxy %s {
		flush_interval -1
		transport http {
			max_conns_per_host {$MAX_CONNS:3500}
		}
	}
}
:%d {
	bind 127.0.0.1
	gpu_turnstile
	reverse_proxy %s
}
`, admin, oll.URL, cmf.URL, settings, pl, oll.URL, pi, cmf.URL)
	err := loadCaddy(cfg)
	return oll, cmf, fmt.Sprintf("http://127.0.0.1:%d", pl), fmt.Sprintf("http://127.0.0.1:%d", pi), fmt.Sprintf("http://127.0.0.1:%d", admin), err
}

func post(url, body string) (string, error) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// at returns the time of the first event at or after from that matches.
func at(ev []gputest.Event, from int, service, what string) (time.Time, int) {
	i := gputest.Index(ev, from, service, what)
	if i < 0 {
		return time.Time{}, -1
	}
	return ev[i].At, i
}

func runSwitch(args []string) error {
	fs := newFlags("switch")
	n := fs.Int("n", 20, "switches measured in each direction")
	llms := fs.String("llm", "", "measure these LLM engines (comma-separated: ollama,llamacpp,llamaswap,vllm) against -image, instead of Ollama and ComfyUI in detail")
	images := fs.String("image", "comfyui,a1111", "the image engines for -llm (comfyui,a1111)")
	fs.Parse(args)
	if *llms != "" {
		return runPairs(splitKinds(*llms), splitKinds(*images), *n)
	}
	gpu := gputest.New()
	// Default history_poll_interval (1s): the job's end must be seen
	// through ComfyUI's websocket, not by polling.
	_, _, llm, image, _, err := simulated(gpu,
		ollamatest.Options{LoadDelay: 30 * time.Millisecond, UnloadDelay: 80 * time.Millisecond, Tokens: 3, TokenDelay: 5 * time.Millisecond},
		comfytest.Options{JobDuration: 150 * time.Millisecond, FreeDelay: 40 * time.Millisecond}, "")
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond) // start-up probe and websocket
	// Each prompt has its own seed, or ComfyUI's cache would answer it.
	seed := 0
	prompt := func() string {
		seed++
		return fmt.Sprintf(`{"prompt":{"3":{"class_type":"KSampler","inputs":{"seed":%d}},"9":{"class_type":"SaveImage"}}}`, seed)
	}
	chat := `{"model":"llama3.2","messages":[{"role":"user","content":"hi"}],"stream":false}`

	var toLLM, toImage, unloads, frees []time.Duration
	for range *n {
		// Image -> LLM: a chat arrives during a job and waits.
		from := len(gpu.Events())
		done := make(chan error, 1)
		p := prompt()
		go func() { _, err := post(image+"/prompt", p); done <- err }()
		time.Sleep(60 * time.Millisecond) // the job is running
		if _, err := post(llm+"/api/chat", chat); err != nil {
			return err
		}
		if err := <-done; err != nil {
			return err
		}
		ev := gpu.Events()
		// The job has ended when ComfyUI writes its history entry and
		// takes it off the queue, ~100 ms after its final message.
		jobEnd, i := at(ev, from, "comfy", "history ")
		freeReq, _ := at(ev, i, "comfy", "free requested")
		freed, _ := at(ev, i, "comfy", "free")
		for j := i; j < len(ev); j++ { // "free" also matches "free requested"
			if ev[j].Service == "comfy" && ev[j].What == "free" {
				freed = ev[j].At
				break
			}
		}
		reached, _ := at(ev, i, "ollama", "request /api/chat")
		if jobEnd.IsZero() || reached.IsZero() || freed.IsZero() {
			return fmt.Errorf("incomplete timeline:\n%s", gputest.Dump(ev[from:]))
		}
		frees = append(frees, freed.Sub(freeReq))
		toLLM = append(toLLM, reached.Sub(jobEnd)-freed.Sub(freeReq))

		// LLM -> image: a prompt arrives during a chat and waits.
		from = len(gpu.Events())
		go func() { _, err := post(llm+"/api/chat", chat); done <- err }()
		time.Sleep(10 * time.Millisecond) // the chat is streaming
		if _, err := post(image+"/prompt", prompt()); err != nil {
			return err
		}
		if err := <-done; err != nil {
			return err
		}
		ev = gpu.Events()
		chatEnd, i := at(ev, from, "ollama", "done /api/chat")
		unloadReq, _ := at(ev, i, "ollama", "unload requested")
		unloaded, _ := at(ev, i, "ollama", "unload llama3.2")
		queued, _ := at(ev, i, "comfy", "queued")
		if chatEnd.IsZero() || queued.IsZero() || unloaded.IsZero() {
			return fmt.Errorf("incomplete timeline:\n%s", gputest.Dump(ev[from:]))
		}
		unloads = append(unloads, unloaded.Sub(unloadReq))
		toImage = append(toImage, queued.Sub(chatEnd)-unloaded.Sub(unloadReq))
		// Let the job end and the GPU settle before the next round.
		for gpu.Users("comfy") > 0 {
			<-gpu.Changed()
		}
	}
	for _, s := range [][]time.Duration{toLLM, toImage, unloads, frees} {
		sortDurations(s)
	}
	fmt.Printf("Switch latency over %d switches each way (simulated services; their own times excluded)\n", *n)
	fmt.Printf("  job end -> waiting chat reaches Ollama, minus the free: median %s  p90 %s  max %s  (free itself: median %s)\n",
		ms(percentile(toLLM, .5)), ms(percentile(toLLM, .9)), ms(percentile(toLLM, 1)), ms(percentile(frees, .5)))
	fmt.Printf("  chat end -> prompt reaches ComfyUI, minus Ollama's unload: median %s  p90 %s  max %s  (unload itself: median %s)\n",
		ms(percentile(toImage, .5)), ms(percentile(toImage, .9)), ms(percentile(toImage, 1)), ms(percentile(unloads, .5)))
	return nil
}
