package turnstile

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/certmagic"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds/kindstest"
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
	config string                 // the Caddyfile loaded
	sites  map[string]string      // engine kind -> Caddy's URL in front of it
	fakes  map[string]engine.Fake // engine kind -> its fake

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
	// blocks are lines of an engine's block, by kind (header ...).
	blocks map[string]string
	// logFile, if set, is where Caddy writes its log, at DEBUG.
	logFile string
}

func newMix(t *testing.T, opts mixOptions) *mix {
	t.Helper()
	h := &harness{t: t, gpu: gputest.New(), client: newTestClient()}
	h.gpu.ShareAmong(kindstest.LLMServices()...)
	if opts.memory > 0 {
		h.withMemory(opts.memory)
	}
	m := &mix{harness: h, sites: map[string]string{}, fakes: map[string]engine.Fake{}}
	if slices.Contains(opts.engines, "vllm") && slices.Contains(opts.engines, "a1111") {
		// Both load at launch, before Caddy can do anything about it.
		opts.a1111.NotLoadedAtStart = true
	}
	var engines, sites []string
	var closers []func()
	for _, kind := range opts.engines {
		url := m.start(kind, opts)
		closers = append(closers, m.fakes[kind].Close)
		class := "image"
		if kinds.Is(engine.ClassLLM, kind) {
			class = "llm"
		}
		line := fmt.Sprintf("%s %s %s", class, kind, url)
		if b := opts.blocks[kind]; b != "" {
			line += " {\n\t\t\t" + b + "\n\t\t}"
		}
		engines = append(engines, line)
		p := freePort(t)
		m.sites[kind] = fmt.Sprintf("http://127.0.0.1:%d", p)
		sites = append(sites, fmt.Sprintf(":%d {\n\tbind 127.0.0.1\n\t%s\n\thandle /healthz {\n\t\tgpu_turnstile_status\n\t}\n\thandle /healthz/full {\n\t\tgpu_turnstile_status {\n\t\t\tdetail full\n\t\t}\n\t}\n\tgpu_turnstile\n\treverse_proxy %s {\n\t\tflush_interval -1\n\t}\n}\n", p, opts.site, url))
	}
	h.ports[2] = freePort(t)
	h.admin = fmt.Sprintf("http://127.0.0.1:%d", h.ports[2])
	h.llm = m.sites[opts.engines[0]] // where h.status reads /healthz/full
	logs := "log {\n\t\toutput discard\n\t}"
	if os.Getenv("TURNSTILE_TEST_LOGS") != "" {
		logs = "log {\n\t\tlevel DEBUG\n\t}"
	}
	if opts.logFile != "" {
		logs = fmt.Sprintf("log {\n\t\toutput file %s\n\t\tlevel DEBUG\n\t}", opts.logFile)
	}
	// Each test its own storage, as newHarness gives it.
	caddy.DefaultStorage = &certmagic.FileStorage{Path: t.TempDir()}
	m.config = fmt.Sprintf(`{
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
%s`, h.ports[2], logs, strings.Join(engines, "\n\t\t"), opts.settings, strings.Join(sites, "\n"))
	h.load(m.config)
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

// start starts the fake engine of kind through the registry and returns
// its URL.
func (m *mix) start(kind string, opts mixOptions) string {
	f, ok := kindstest.Start(kind, m.gpu, opts.fakeOptions()[kind])
	if !ok {
		m.t.Fatalf("no fake engine of kind %q", kind)
	}
	m.fakes[kind] = f
	switch s := f.Server.(type) {
	case *ollamatest.Server:
		m.ollama = s
	case *llamacpptest.Server:
		m.llamacpp = s
	case *llamaswaptest.Server:
		m.swap = s
	case *vllmtest.Server:
		m.vllm = s
	case *comfytest.Server:
		m.comfy = s
	case *a1111test.Server:
		m.a1111 = s
	}
	return f.URL
}

// fakeOptions are the fakes' options by kind.
func (o mixOptions) fakeOptions() map[string]any {
	return map[string]any{"ollama": o.ollama, "llamacpp": o.llamacpp, "llamaswap": o.swap, "vllm": o.vllm,
		"comfyui": o.comfy, "a1111": o.a1111}
}

// chatPath is the chat route of an LLM engine through Caddy.
func (m *mix) chatPath(kind string) string {
	return m.sites[kind] + m.fakes[kind].ChatPath
}

// chatModel is a model the fake LLM engine of kind serves.
func (m *mix) chatModel(kind string) string { return m.fakes[kind].ChatModel }

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
	f := m.fakes[kind]
	if kinds.JobID(kind) == nil { // synchronous: the answer is the job's end
		if r := m.post(ctx, m.sites[kind]+f.JobPath, f.JobBody); r.status != 200 {
			t.Fatalf("%s: %d %s %v", f.JobPath, r.status, r.body, r.err)
		}
		return
	}
	promptID(t, m.post(ctx, m.sites[kind]+f.JobPath, promptBody(50)))
}

// service is the name a fake engine of kind uses on the simulated GPU.
func service(kind string) string { return kindstest.Service(kind) }
