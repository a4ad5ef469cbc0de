package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

// A fleet host is a turnstile of its own name, on its own simulated GPU,
// in front of its own fake Ollama and ComfyUI, served on a port of its
// own (ComfyUI's routes to ComfyUI, the rest to Ollama) in reject mode,
// as docs/scaling.md has hosts behind a front. All hosts and the front
// run in this process's Caddy: the turnstiles' names tell them apart.
type fleetHost struct {
	name   string
	port   int
	gpu    *gputest.GPU
	ollama *ollamatest.Server
	comfy  *comfytest.Server
}

// The card and the models: two chat models fit beside each other, not
// three, so a host that serves every model keeps loading them.
const (
	fleetCardBytes  = 16 << 30
	fleetModelBytes = 6 << 30
)

// fleetCosts are the fakes' times, scaled down as the day is.
type fleetCosts struct {
	load, unload, free time.Duration
	tokens             int
	tokenDelay         time.Duration
}

func startFleetHost(name string, c fleetCosts) *fleetHost {
	h := &fleetHost{name: name, port: freePort(), gpu: gputest.New()}
	h.gpu.SetMemory(fleetCardBytes)
	sizes := map[string]int64{}
	for _, m := range fleetModels {
		sizes[m] = fleetModelBytes
	}
	h.ollama = ollamatest.NewServer(h.gpu, ollamatest.Options{Models: fleetModels, ModelSizes: sizes,
		LoadDelay: c.load, UnloadDelay: c.unload, Tokens: c.tokens, TokenDelay: c.tokenDelay})
	h.comfy = comfytest.NewServer(h.gpu, comfytest.Options{FreeDelay: c.free})
	return h
}

func (h *fleetHost) close() {
	h.ollama.Close()
	h.comfy.Close()
}

func (h *fleetHost) addr() string { return fmt.Sprintf("127.0.0.1:%d", h.port) }

// globalOption is the host's turnstile, in the global options.
func (h *fleetHost) globalOption() string {
	return fmt.Sprintf(`
	gpu_turnstile %s {
		ollama %s
		comfy %s
		llm_busy_mode reject
		history_poll_interval 20ms
		unload_poll_interval 20ms
	}`, h.name, h.ollama.URL, h.comfy.URL)
}

// site is the host's server block.
func (h *fleetHost) site() string {
	return fmt.Sprintf(`
:%d {
	bind 127.0.0.1
	header X-GPU-Host %s
	handle /healthz {
		gpu_turnstile_status %s
	}
	gpu_turnstile {
		turnstile %s
	}
	@comfy path /prompt /ws /history /history/* /queue /view /upload/* /interrupt
	reverse_proxy @comfy %s
	reverse_proxy %s {
		flush_interval -1
	}
}
`, h.port, h.name, h.name, h.name, h.comfy.URL, h.ollama.URL)
}

// fleetPolicy is a front tier: the blocks its LLM site and its image
// site are made of (the same for all but the old front-tier example's).
type fleetPolicy struct {
	name       string
	llm, image func(hosts string) string
}

// plainFront is a reverse_proxy over the hosts with policy, retrying a
// host's 429 and 503 on another, as the fleet does; health adds lines.
func plainFront(policy, health string) func(string) string {
	return func(hosts string) string {
		return fmt.Sprintf(`reverse_proxy %s {
		lb_policy %s
		lb_retries 2
		lb_retry_match {
			expression {rp.status_code} in [429, 503]
		}
		request_buffers 4MiB
		flush_interval -1%s
	}`, hosts, policy, health)
	}
}

func fleetFront(hosts string) string {
	return fmt.Sprintf(`gpu_turnstile_fleet %s {
		fallback least_conn
		keep_for_chats 3s
	}`, hosts)
}

var fleetPolicies = []fleetPolicy{
	{"gpu_turnstile", fleetFront, fleetFront},
	{"least_conn", plainFront("least_conn", ""), plainFront("least_conn", "")},
	{"round_robin", plainFront("round_robin", ""), plainFront("round_robin", "")},
	// examples/front-tier before gpu_turnstile_fleet: LLM requests
	// round-robin over the hosts whose ?ready=llm answers 200, image
	// jobs least_conn over the hosts that are up.
	{"front-tier (?ready=llm)",
		plainFront("round_robin", "\n\t\thealth_uri /healthz?ready=llm\n\t\thealth_interval 200ms\n\t\thealth_timeout 1s\n\t\thealth_status 200"),
		plainFront("least_conn", "\n\t\thealth_uri /healthz\n\t\thealth_interval 500ms")},
}

// fleetCaddyfile is the whole config: the hosts and the policy's two
// front sites, on llmPort and imagePort.
func fleetCaddyfile(hosts []*fleetHost, p fleetPolicy, llmPort, imagePort int) string {
	var b strings.Builder
	b.WriteString("{" + fmt.Sprintf(globalOpts, freePort()))
	addrs := make([]string, len(hosts))
	for i, h := range hosts {
		b.WriteString(h.globalOption())
		addrs[i] = h.addr()
	}
	b.WriteString("\n}\n")
	for _, h := range hosts {
		b.WriteString(h.site())
	}
	list := strings.Join(addrs, " ")
	fmt.Fprintf(&b, "\n:%d {\n\tbind 127.0.0.1\n\t%s\n}\n", llmPort, p.llm(list))
	fmt.Fprintf(&b, "\n:%d {\n\tbind 127.0.0.1\n\t%s\n}\n", imagePort, p.image(list))
	return b.String()
}
