package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// The engines the demo can simulate, one LLM kind and one image kind at a
// time. Each fake runs on the shared simulated GPU with delays of the order
// of the real engine's (shortened).

// llmEngine is an LLM engine kind and how the scene talks to it.
type llmEngine struct {
	kind    string    // as the llm option spells it
	name    string    // as people call it
	service string    // its name on the simulated GPU
	models  [3]string // the models of chats A, B and C
	warm    string    // warm_model, or "" if the kind cannot load one ahead
	resumed string    // what the GPU shows when it takes the GPU back
	start   func(gpu *gputest.GPU) (url string, stop func())
}

// imageEngine is an image engine kind and how the scene talks to it.
type imageEngine struct {
	kind    string // as the image option spells it
	name    string
	service string
	freed   string // what the GPU shows when the turnstile has freed it
	start   func(gpu *gputest.GPU, notLoadedAtStart bool) (url string, stop func())
	submit  func(d *demo) // the scene's image request, reported with d.say
	try     string        // a curl command line for the image site, %s its URL
}

const (
	llmTiming   = 800 * time.Millisecond // a model's load, or vLLM's wake
	stopTiming  = 300 * time.Millisecond // a model's unload, or vLLM's sleep
	tokens      = 25
	tokenTiming = 60 * time.Millisecond
	jobTiming   = 3 * time.Second
)

var llmEngines = map[string]llmEngine{
	"ollama": {kind: "ollama", name: "Ollama", service: "ollama", models: [3]string{"llama3.2", "qwen3:8b", "llama3.2"},
		warm: "llama3.2", resumed: "load", start: func(gpu *gputest.GPU) (string, func()) {
			s := ollamatest.NewUnstarted(gpu, ollamatest.Options{LoadDelay: llmTiming,
				UnloadDelay: stopTiming, Tokens: tokens, TokenDelay: tokenTiming})
			s.Listener = listen(11435)
			s.Start()
			return s.URL, s.Close
		}},
	"llamacpp": {kind: "llamacpp", name: "llama.cpp", service: "llamacpp", models: [3]string{"qwen3-8b", "gemma-3-4b", "qwen3-8b"},
		warm: "qwen3-8b", resumed: "load", start: func(gpu *gputest.GPU) (string, func()) {
			s := llamacpptest.NewServer(gpu, llamacpptest.Options{LoadDelay: llmTiming,
				StopDelay: stopTiming, Tokens: tokens, TokenDelay: tokenTiming})
			return s.URL(), s.Close
		}},
	// llama-swap runs one model at a time: the chats share one.
	"llamaswap": {kind: "llamaswap", name: "llama-swap", service: "llamaswap", models: [3]string{"qwen3-8b", "qwen3-8b", "qwen3-8b"},
		resumed: "load", start: func(gpu *gputest.GPU) (string, func()) {
			s := llamaswaptest.NewServer(gpu, llamaswaptest.Options{StartDelay: llmTiming,
				StopDelay: stopTiming, Tokens: tokens, TokenDelay: tokenTiming})
			return s.URL(), s.Close
		}},
	// vLLM serves the one model it loaded at start, and is woken after a job.
	"vllm": {kind: "vllm", name: "vLLM", service: "vllm", models: [3]string{"Qwen/Qwen3-8B", "Qwen/Qwen3-8B", "Qwen/Qwen3-8B"},
		resumed: "wake", start: func(gpu *gputest.GPU) (string, func()) {
			s := vllmtest.NewServer(gpu, vllmtest.Options{SleepDelay: stopTiming,
				WakeDelay: llmTiming, Tokens: tokens, TokenDelay: tokenTiming})
			return s.URL(), s.Close
		}},
}

var imageEngines = map[string]imageEngine{
	"comfyui": {kind: "comfyui", name: "ComfyUI", service: "comfy", freed: "free", submit: submitComfy,
		try: `curl %s/api/prompt -d '{"prompt":{"3":{"class_type":"KSampler"},"9":{"class_type":"SaveImage"}}}'`,
		start: func(gpu *gputest.GPU, _ bool) (string, func()) {
			s := comfytest.NewUnstarted(gpu, comfytest.Options{JobDuration: jobTiming, FreeDelay: 200 * time.Millisecond})
			s.Listener = listen(8189)
			s.Start()
			return s.URL, s.Close
		}},
	"a1111": {kind: "a1111", name: "A1111", service: "a1111", freed: "checkpoint off GPU", submit: submitA1111,
		try: `curl %s/sdapi/v1/txt2img -H 'Content-Type: application/json' -d '{"prompt":"a lighthouse","steps":20}'`,
		start: func(gpu *gputest.GPU, notLoaded bool) (string, func()) {
			s := a1111test.NewServer(gpu, a1111test.Options{JobDuration: jobTiming, LoadDelay: 500 * time.Millisecond,
				UnloadDelay: 200 * time.Millisecond, NotLoadedAtStart: notLoaded})
			return s.URL(), s.Close
		}},
}

// parseEngines reads -engines: one LLM kind and one image kind, in either
// order.
func parseEngines(s string) (llmEngine, imageEngine, error) {
	var llm, image []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		_, isLLM := llmEngines[k]
		_, isImage := imageEngines[k]
		switch {
		case isLLM:
			llm = append(llm, k)
		case isImage:
			image = append(image, k)
		default:
			return llmEngine{}, imageEngine{}, fmt.Errorf("-engines %q: unknown engine kind %q (LLM: %s; image: %s)",
				s, k, kinds(llmEngines), kinds(imageEngines))
		}
	}
	if len(llm) != 1 || len(image) != 1 {
		return llmEngine{}, imageEngine{}, fmt.Errorf("-engines %q: give one LLM kind (%s) and one image kind (%s), e.g. llamacpp,a1111",
			s, kinds(llmEngines), kinds(imageEngines))
	}
	return llmEngines[llm[0]], imageEngines[image[0]], nil
}

func kinds[E any](m map[string]E) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// chat returns the route and body of a streamed chat: Ollama's own API
// (NDJSON lines), or the OpenAI one (SSE, with "stream":true).
func (e llmEngine) chat(model, content string) (path, body string) {
	if e.kind == "ollama" {
		return "/api/chat", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]}`, model, content)
	}
	return "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":%q}]}`, model, content)
}

// try is a curl command line for the LLM site at url.
func (e llmEngine) try(url string) string {
	path, body := e.chat(e.models[0], "hi")
	if e.kind == "ollama" {
		return fmt.Sprintf("curl %s%s -d '%s'", url, path, body)
	}
	return fmt.Sprintf("curl -N %s%s -H 'Content-Type: application/json' -d '%s'", url, path, body)
}

// submitComfy queues a prompt on ComfyUI, which answers at once.
func submitComfy(d *demo) {
	start := time.Now()
	resp, err := http.Post(d.image+"/api/prompt", "application/json", strings.NewReader(
		`{"prompt":{"3":{"class_type":"KSampler","inputs":{}},"9":{"class_type":"SaveImage","inputs":{}}},"client_id":"demo"}`))
	if err != nil {
		d.say("image: %v", err)
		return
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		PromptID string `json:"prompt_id"`
	}
	json.Unmarshal(b, &out)
	d.say("image: ComfyUI accepted the prompt after %.2fs (prompt_id %s)", time.Since(start).Seconds(), short(out.PromptID))
}

// submitA1111 renders on A1111, which answers at the job's end.
func submitA1111(d *demo) {
	start := time.Now()
	resp, err := http.Post(d.image+"/sdapi/v1/txt2img", "application/json",
		strings.NewReader(`{"prompt":"a lighthouse","steps":20}`))
	if err != nil {
		d.say("image: %v", err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d.say("image: A1111 answered after %.2fs (status %d)", time.Since(start).Seconds(), resp.StatusCode)
}
