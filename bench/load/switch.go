package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds/kindstest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// The switch benchmark's detailed rig is about Ollama and ComfyUI alone
// (their own unload and free marks), as is the scale benchmark's, built on
// simulated too: they name those two fakes, whereas -llm's pairs start any
// kind through the registry (pairs.go).

// The simulated Ollama and ComfyUI of the detailed switch benchmark, with
// the pairs' delays (pairLLM, pairImage).
var (
	fakeOllama = ollamatest.Options{LoadDelay: pairLLM.Load, UnloadDelay: pairLLM.Unload, Tokens: pairLLM.Tokens, TokenDelay: pairLLM.TokenDelay}
	fakeComfy  = comfytest.Options{JobDuration: pairImage.Job, FreeDelay: pairImage.Unload}
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

// post sends body as JSON to url and returns the answer's body.
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

// runSwitch measures switch latency: Ollama and ComfyUI in detail, or with
// -llm every pair of the given engines.
func runSwitch(args []string) error {
	fs := newFlags("switch")
	n := fs.Int("n", 20, "switches measured in each direction")
	llmKinds, imageKinds := strings.Join(kindstest.Names(engine.ClassLLM), ","), strings.Join(kindstest.Names(engine.ClassImage), ",")
	llms := fs.String("llm", "", "measure these LLM engines (comma-separated: "+llmKinds+") against -image, instead of Ollama and ComfyUI in detail")
	images := fs.String("image", imageKinds, "the image engines for -llm ("+imageKinds+")")
	fs.Parse(args)
	if *llms != "" {
		return runPairs(splitKinds(*llms), splitKinds(*images), *n)
	}
	return runOllamaComfySwitch(*n)
}

// runOllamaComfySwitch measures n switches each way between Ollama and
// ComfyUI, with the free and the unload timed from the engines' marks.
func runOllamaComfySwitch(n int) error {
	gpu := gputest.New()
	// Default history_poll_interval (1s): the job's end must be seen
	// through ComfyUI's websocket, not by polling.
	_, _, llm, image, _, err := simulated(gpu, fakeOllama, fakeComfy, "")
	if err != nil {
		return err
	}
	time.Sleep(300 * time.Millisecond) // start-up probe and websocket
	prompt := comfyPrompts()
	chat := chatBody("llama3.2")

	var toLLM, toImage, unloads, frees []time.Duration
	for range n {
		overhead, free, err := comfyToOllama(gpu, llm, image, chat, prompt())
		if err != nil {
			return err
		}
		frees = append(frees, free)
		toLLM = append(toLLM, overhead)

		overhead, unload, err := ollamaToComfy(gpu, llm, image, chat, prompt())
		if err != nil {
			return err
		}
		unloads = append(unloads, unload)
		toImage = append(toImage, overhead)
		// Let the job end and the GPU settle before the next round.
		for gpu.Users("comfy") > 0 {
			<-gpu.Changed()
		}
	}
	printOllamaComfySwitch(n, toLLM, toImage, unloads, frees)
	return nil
}

// comfyToOllama is the image -> LLM half: a chat arrives during a job and
// waits. It returns the switch's overhead without the free, and the free.
func comfyToOllama(gpu *gputest.GPU, llm, image, chat, prompt string) (overhead, free time.Duration, err error) {
	ev, from, err := switchHalf(gpu, image+"/prompt", prompt, llm+"/api/chat", chat, func(int) {
		time.Sleep(60 * time.Millisecond) // the job is running
	})
	if err != nil {
		return 0, 0, err
	}
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
		return 0, 0, incomplete(ev, from)
	}
	return reached.Sub(jobEnd) - freed.Sub(freeReq), freed.Sub(freeReq), nil
}

// ollamaToComfy is the LLM -> image half: a prompt arrives during a chat
// and waits. It returns the switch's overhead without Ollama's unload, and
// the unload.
func ollamaToComfy(gpu *gputest.GPU, llm, image, chat, prompt string) (overhead, unload time.Duration, err error) {
	ev, from, err := switchHalf(gpu, llm+"/api/chat", chat, image+"/prompt", prompt, func(int) {
		time.Sleep(10 * time.Millisecond) // the chat is streaming
	})
	if err != nil {
		return 0, 0, err
	}
	chatEnd, i := at(ev, from, "ollama", "done /api/chat")
	unloadReq, _ := at(ev, i, "ollama", "unload requested")
	unloaded, _ := at(ev, i, "ollama", "unload llama3.2")
	queued, _ := at(ev, i, "comfy", "queued")
	if chatEnd.IsZero() || queued.IsZero() || unloaded.IsZero() {
		return 0, 0, incomplete(ev, from)
	}
	return queued.Sub(chatEnd) - unloaded.Sub(unloadReq), unloaded.Sub(unloadReq), nil
}

// printOllamaComfySwitch reports both directions' overheads and the
// engines' own steps they exclude.
func printOllamaComfySwitch(n int, toLLM, toImage, unloads, frees []time.Duration) {
	sortAll(toLLM, toImage, unloads, frees)
	fmt.Printf("Switch latency over %d switches each way (simulated services; their own times excluded)\n", n)
	fmt.Printf("  job end -> waiting chat reaches Ollama, minus the free: median %s  p90 %s  max %s  (free itself: median %s)\n",
		ms(percentile(toLLM, .5)), ms(percentile(toLLM, .9)), ms(percentile(toLLM, 1)), ms(percentile(frees, .5)))
	fmt.Printf("  chat end -> prompt reaches ComfyUI, minus Ollama's unload: median %s  p90 %s  max %s  (unload itself: median %s)\n",
		ms(percentile(toImage, .5)), ms(percentile(toImage, .9)), ms(percentile(toImage, 1)), ms(percentile(unloads, .5)))
}
