package config

import (
	"sort"
	"strings"

	a1111engine "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/comfyui"
	llamacppengine "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/llamacpp"
	llamaswapengine "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/llamaswap"
	ollamaengine "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/ollama"
	vllmengine "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/vllm"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamaswap"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/vllm"
)

// The classes of engines, as the settings and the Caddyfile name them.
const (
	LLM   = "llm"   // shares the GPU with the other LLM engines
	Image = "image" // takes the GPU alone for a job
)

// shorthands are the options that give a class's first engine by its URL
// alone: `ollama URL` is `llm ollama URL`, `comfy URL` is `image comfyui
// URL`.
var shorthands = map[string]struct{ option, kind string }{
	LLM:   {"ollama", "ollama"},
	Image: {"comfy", "comfyui"},
}

// Kind is what the turnstile knows of one kind of engine. A new engine is
// its adapter and one entry in Kinds.
type Kind struct {
	Name  string // as the settings spell it
	Class string // LLM or Image

	// build makes the engine's adapter, named name, at url, with the
	// timings of c (filled in before the engines are built).
	build func(name, url string, c *Turnstile) (gpu.Engine, error)

	// Warms says it can load warm_model ahead of a request.
	Warms bool

	// Jobs are the routes (cleaned, lower case) a POST to which starts a
	// job on an image engine of this kind.
	Jobs []string

	// ServesJobsOf is the kind whose job routes this one serves as LLM
	// work: llama-swap serves A1111's (stable-diffusion.cpp).
	ServesJobsOf string

	// API is the error shape its clients parse, on its own routes.
	API httpapi.API
}

// Kinds are the engines the turnstile knows, in the order messages list
// them.
var Kinds = []Kind{
	{Name: "ollama", Class: LLM, Warms: true, API: httpapi.Ollama, build: func(name, url string, c *Turnstile) (gpu.Engine, error) {
		oc, err := ollama.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		return ollamaengine.New(name, oc, c.GPU.UnloadPoll), nil
	}},
	{Name: "llamacpp", Class: LLM, Warms: true, API: httpapi.OpenAI, build: func(name, url string, c *Turnstile) (gpu.Engine, error) {
		lc, err := llamacpp.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		return llamacppengine.New(name, lc, c.GPU.UnloadPoll), nil
	}},
	{Name: "llamaswap", Class: LLM, ServesJobsOf: "a1111", API: httpapi.OpenAI, build: func(name, url string, _ *Turnstile) (gpu.Engine, error) {
		sc, err := llamaswap.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		return llamaswapengine.New(name, sc), nil
	}},
	{Name: "vllm", Class: LLM, API: httpapi.OpenAI, build: func(name, url string, c *Turnstile) (gpu.Engine, error) {
		vc, err := vllm.NewClient(url, nil)
		if err != nil {
			return nil, err
		}
		return vllmengine.New(name, vc, c.GPU.UnloadPoll), nil
	}},
	{Name: "comfyui", Class: Image, API: httpapi.ComfyUI, Jobs: []string{"/prompt", "/api/prompt"}, build: buildComfy},
	{
		Name: "a1111", Class: Image, API: httpapi.A1111,
		// Its answer comes at the job's end; setting a checkpoint
		// through /options loads it on the GPU too.
		Jobs: []string{"/sdapi/v1/txt2img", "/sdapi/v1/img2img", "/sdapi/v1/extra-single-image",
			"/sdapi/v1/extra-batch-images", "/sdapi/v1/interrogate", "/sdapi/v1/options",
			"/sdapi/v1/reload-checkpoint", "/sdapi/v1/create/embedding", "/sdapi/v1/create/hypernetwork",
			"/sdapi/v1/train/embedding", "/sdapi/v1/train/hypernetwork"},
		build: func(name, url string, c *Turnstile) (gpu.Engine, error) {
			ac, err := a1111.NewClient(url, nil)
			if err != nil {
				return nil, err
			}
			return a1111engine.New(name, ac, c.HistoryPoll, c.GPU.UnloadPoll), nil
		},
	},
}

// buildComfy builds a ComfyUI engine; the first one's client also reads
// the card's free memory for vram_probe comfy.
func buildComfy(name, url string, c *Turnstile) (gpu.Engine, error) {
	cc, err := comfy.NewClient(url, nil)
	if err != nil {
		return nil, err
	}
	if c.comfy == nil {
		c.comfy, c.comfyName = cc, name
	}
	return comfyui.New(name, cc, comfyui.Options{HistoryPoll: c.HistoryPoll, FreePoll: c.GPU.UnloadPoll,
		BackoffInitial: c.GPU.BackoffInitial, BackoffMax: c.GPU.BackoffMax}), nil
}

// kinds are Kinds by name.
var kinds = func() map[string]Kind {
	m := make(map[string]Kind, len(Kinds))
	for _, k := range Kinds {
		m[k.Name] = k
	}
	return m
}()

// KindOf is the kind named name.
func KindOf(name string) (Kind, bool) {
	k, ok := kinds[name]
	return k, ok
}

// IsKind reports whether name is a kind of engine of class.
func IsKind(class, name string) bool {
	k, ok := kinds[name]
	return ok && k.Class == class
}

// KindNames lists the kinds of class, sorted, for messages.
func KindNames(class string) string {
	var ks []string
	for _, k := range Kinds {
		if k.Class == class {
			ks = append(ks, k.Name)
		}
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// warmKinds lists the kinds that can warm, for messages.
func warmKinds() string {
	var ks []string
	for _, k := range Kinds {
		if k.Warms {
			ks = append(ks, k.Name)
		}
	}
	return strings.Join(ks, " or ")
}

// Routes are the engines' routes as classification knows them (package
// route), from Kinds.
var Routes = func() *route.Table {
	jobs, serves := map[string]string{}, map[string]string{}
	for _, k := range Kinds {
		for _, p := range k.Jobs {
			jobs[p] = k.Name
		}
		if k.ServesJobsOf != "" {
			serves[k.Name] = k.ServesJobsOf
		}
	}
	return route.NewTable(jobs, serves)
}()
