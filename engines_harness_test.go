package turnstile

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap/llamaswaptest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm/vllmtest"
)

// mix runs a real Caddy in front of any mix of the fake engines on one
// turnstile, all sharing one simulated GPU, with a site per engine. The
// LLM engines may share the GPU with one another; any overlap with an
// image engine fails the test.
type mix struct {
	*harness
	sites map[string]string // engine kind -> Caddy's URL in front of it

	ollama   *ollamatest.Server
	llamacpp *llamacpptest.Server
	swap     *llamaswaptest.Server
	vllm     *vllmtest.Server
	comfy    *comfytest.Server
	a1111    *a1111test.Server
}

type mixOptions struct {
	engines  []string // kinds: ollama, llamacpp, llamaswap, vllm, comfyui, a1111
	settings string   // extra lines in the gpu_turnstile block
	site     string   // extra directives in each site block
	ollama   ollamatest.Options
	llamacpp llamacpptest.Options
	swap     llamaswaptest.Options
	vllm     vllmtest.Options
	comfy    comfytest.Options
	a1111    a1111test.Options
	// memory, if set, is the card's size, read through the fake
	// nvidia-smi put on PATH.
	memory int64
}

var llmKinds = map[string]bool{"ollama": true, "llamacpp": true, "llamaswap": true, "vllm": true}

func newMix(t *testing.T, opts mixOptions) *mix {
	t.Helper()
	h := &harness{t: t, gpu: gputest.New(), client: newTestClient()}
	h.gpu.ShareAmong("ollama", "llamacpp", "llamaswap", "vllm")
	if opts.memory > 0 {
		h.withMemory(opts.memory)
	}
	m := &mix{harness: h, sites: map[string]string{}}
	if slices.Contains(opts.engines, "vllm") && slices.Contains(opts.engines, "a1111") {
		// Both load at launch, before Caddy can do anything about it.
		opts.a1111.NotLoadedAtStart = true
	}
	var engines, sites []string
	var closers []func()
	for _, kind := range opts.engines {
		url := m.start(kind, opts)
		closers = append(closers, m.closer(kind))
		class := "image"
		if llmKinds[kind] {
			class = "llm"
		}
		engines = append(engines, fmt.Sprintf("%s %s %s", class, kind, url))
		p := freePort(t)
		m.sites[kind] = fmt.Sprintf("http://127.0.0.1:%d", p)
		sites = append(sites, fmt.Sprintf(":%d {\n\tbind 127.0.0.1\n\t%s\n\thandle /healthz {\n\t\tgpu_turnstile_status\n\t}\n\tgpu_turnstile\n\treverse_proxy %s {\n\t\tflush_interval -1\n\t}\n}\n", p, opts.site, url))
	}
	h.ports[2] = freePort(t)
	h.admin = fmt.Sprintf("http://127.0.0.1:%d", h.ports[2])
	h.llm = m.sites[opts.engines[0]] // where h.status reads /healthz
	logs := "log {\n\t\toutput discard\n\t}"
	if os.Getenv("TURNSTILE_TEST_LOGS") != "" {
		logs = "log {\n\t\tlevel DEBUG\n\t}"
	}
	h.load(fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	%s
	gpu_turnstile {
		%s
		history_poll_interval 20ms
		unload_poll_interval 20ms
		backoff 10ms 100ms
		%s
	}
}
%s`, h.ports[2], logs, strings.Join(engines, "\n\t\t"), opts.settings, strings.Join(sites, "\n")))
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stopping caddy: %v", err)
		}
		h.client.CloseIdleConnections()
		for _, c := range closers {
			c()
		}
		h.checkCard()
	})
	return m
}

// start starts the fake engine of kind and returns its URL.
func (m *mix) start(kind string, opts mixOptions) string {
	switch kind {
	case "ollama":
		m.ollama = ollamatest.NewServer(m.gpu, opts.ollama)
		return m.ollama.URL
	case "llamacpp":
		m.llamacpp = llamacpptest.NewServer(m.gpu, opts.llamacpp)
		return m.llamacpp.URL()
	case "llamaswap":
		m.swap = llamaswaptest.NewServer(m.gpu, opts.swap)
		return m.swap.URL()
	case "vllm":
		m.vllm = vllmtest.NewServer(m.gpu, opts.vllm)
		return m.vllm.URL()
	case "comfyui":
		m.comfy = comfytest.NewServer(m.gpu, opts.comfy)
		return m.comfy.URL
	case "a1111":
		m.a1111 = a1111test.NewServer(m.gpu, opts.a1111)
		return m.a1111.URL()
	}
	m.t.Fatalf("no fake engine of kind %q", kind)
	return ""
}

func (m *mix) closer(kind string) func() {
	switch kind {
	case "ollama":
		return m.ollama.Close
	case "llamacpp":
		return m.llamacpp.Close
	case "llamaswap":
		return m.swap.Close
	case "vllm":
		return m.vllm.Close
	case "comfyui":
		return m.comfy.Close
	}
	return m.a1111.Close
}

// chatPath is the chat route of an LLM engine through Caddy.
func (m *mix) chatPath(kind string) string {
	if kind == "ollama" {
		return m.sites[kind] + "/api/chat"
	}
	return m.sites[kind] + "/v1/chat/completions"
}

// chatModel is a model each fake LLM engine serves.
func chatModel(kind string) string {
	switch kind {
	case "ollama":
		return "llama3.2"
	case "vllm":
		return "Qwen/Qwen3-8B"
	}
	return "qwen3-8b"
}

// txt2imgBody is an A1111 txt2img request.
func txt2imgBody() string {
	return `{"prompt":"a lighthouse at dusk","steps":6,"width":512,"height":512}`
}

// engineState returns the state of the named engine in the status.
func engineState(st Status, name string) string {
	for _, e := range st.Engines {
		if e.Name == name {
			return e.State
		}
	}
	return ""
}

// runImageJob sends one image job to the engine of kind through Caddy and
// waits until it has been answered.
func (m *mix) runImageJob(t *testing.T, kind string) {
	t.Helper()
	ctx := context.Background()
	if kind == "a1111" {
		if r := m.post(ctx, m.sites[kind]+"/sdapi/v1/txt2img", txt2imgBody()); r.status != 200 {
			t.Fatalf("txt2img: %d %s %v", r.status, r.body, r.err)
		}
		return
	}
	promptID(t, m.post(ctx, m.sites[kind]+"/prompt", promptBody(50)))
}

// service is the name a fake engine of kind uses on the simulated GPU.
func service(kind string) string {
	if kind == "comfyui" {
		return "comfy"
	}
	return kind
}
