// Package turnstile is a Caddy v2 plugin that lets one GPU be shared
// safely by LLM servers (Ollama, llama.cpp, llama-swap, vLLM) and image
// generators (ComfyUI, AUTOMATIC1111, Forge). Caddy listens where the
// services normally listen; the gpu_turnstile middleware makes sure the GPU
// is never used by both kinds at once. LLM requests share the GPU; an image
// job takes it alone once the LLM requests have drained and every LLM
// engine has been emptied (confirmed), and keeps it until the job is
// finished and the image engine has freed its memory.
//
// The root package is Caddy wiring: the gpu_turnstile app (settings per
// named turnstile), the middleware, the status handler, the admin routes,
// metrics and the Caddyfile. The lock's policy lives in package lock; what
// the GPU does (job lifecycle, hand-over, holds, unload, free, warm-up,
// VRAM checks, history) lives in internal/gpu.
package turnstile

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	// The front tier over several GPU hosts registers its modules.
	_ "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/fleetcaddy"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/store"
)

func init() {
	caddy.RegisterModule(App{})
	caddy.RegisterModule(Handler{})
}

// App is the gpu_turnstile app: the settings of each named turnstile (one
// per GPU). Its state (the lock, the running job, holds) lives in a
// process-wide pool keyed by name and survives config reloads.
type App struct {
	// Turnstiles by name. The Caddyfile's `gpu_turnstile { ... }` global
	// option makes the one named "default".
	Turnstiles map[string]*Settings `json:"turnstiles,omitempty"`

	configs  map[string]*config
	runtimes map[string]*turnstile // the pooled runtimes this config holds a reference to
	logger   *zap.Logger
}

// UnmarshalJSON decodes the app strictly, naming the turnstile and the
// field of any value it refuses.
func (a *App) UnmarshalJSON(b []byte) (err error) {
	a.Turnstiles, err = tcfg.DecodeApp(b)
	return err
}

// CaddyModule returns the Caddy module information.
func (App) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "gpu_turnstile",
		New: func() caddy.Module { return new(App) },
	}
}

// Provision validates each turnstile's settings and takes a reference to
// its runtime. Settings only take effect in Start, so a config that fails
// to load changes nothing.
func (a *App) Provision(ctx caddy.Context) error {
	a.logger = ctx.Logger()
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return fmt.Errorf("gpu_turnstile: registering metrics: %v", err)
	}
	a.configs = map[string]*config{}
	a.runtimes = map[string]*turnstile{}
	for _, name := range a.names() {
		c, err := tcfg.Load(name, a.Turnstiles[name])
		if err != nil {
			return err
		}
		c.GPU.HoldStore = store.NewHolds(ctx.Storage(), name)
		c.GPU.ProcessStore = store.NewProcesses(ctx.Storage(), name)
		c.GPU.LearnedStore = store.NewLearned(ctx.Storage(), name)
		if c.GPU.Memory != nil {
			c.GPU.Memory.Store = store.NewFootprints(ctx.Storage())
		}
		a.configs[name] = c
		ts, _, err := turnstiles.LoadOrNew(name, func() (caddy.Destructor, error) {
			return newTurnstile(name), nil
		})
		if err != nil {
			return err
		}
		a.runtimes[name] = ts.(*turnstile)
	}
	return nil
}

func (a *App) names() []string { return slices.Sorted(maps.Keys(a.Turnstiles)) }

// Start makes this config's settings current for each turnstile.
func (a *App) Start() error {
	for _, name := range a.names() {
		ts := a.runtimes[name]
		c := a.configs[name]
		log := a.logger.With(zap.String("turnstile", name))
		ts.apply(c, log)
		log.Info("gpu turnstile ready", c.LogFields()...)
		for cond, why := range c.GPU.PresenceOff {
			log.Warn(cond+" is "+why, zap.String("condition", cond))
		}
		for _, w := range c.Warnings() {
			log.Warn(w)
		}
	}
	return nil
}

// Stop does nothing: work in flight belongs to the turnstile, not to this
// config, and carries on into the next one.
func (a *App) Stop() error { return nil }

// Cleanup drops this config's references; the last one out (Caddy stops)
// ends the turnstile's background work.
func (a *App) Cleanup() error {
	for name := range a.runtimes {
		if _, err := turnstiles.Delete(name); err != nil {
			a.logger.Error("releasing turnstile", zap.String("turnstile", name), zap.Error(err))
		}
	}
	a.runtimes = nil
	return nil
}

// lookupTurnstile returns the runtime of the named turnstile of the
// config being provisioned, and that config's settings of it.
func lookupTurnstile(ctx caddy.Context, name string) (*turnstile, *config, error) {
	name = tcfg.OrDefault(name)
	appIface, err := ctx.App("gpu_turnstile")
	if err != nil {
		return nil, nil, fmt.Errorf("gpu_turnstile: loading the app: %v", err)
	}
	app := appIface.(*App)
	ts, ok := app.runtimes[name]
	if !ok {
		known := app.names()
		if len(known) == 0 {
			return nil, nil, fmt.Errorf("gpu_turnstile: no turnstile named %q: add the global option `gpu_turnstile { %s }`", name, tcfg.ShorthandBlock("..."))
		}
		return nil, nil, fmt.Errorf("gpu_turnstile: no turnstile named %q (configured: %v)", name, known)
	}
	return ts, app.configs[name], nil
}

// Handler is the gpu_turnstile middleware. It classifies each request,
// takes the GPU as the class needs, and calls the next handler (usually
// reverse_proxy): LLM requests share the GPU while they stream; an image
// prompt takes it alone and keeps it until the job it queued has ended;
// everything else, websockets included, passes through untouched.
type Handler struct {
	// The request class: "auto" (default) decides from the method and
	// path; "llm", "image" or "passthrough" applies to every request this
	// handler sees (select them with a matcher).
	Class string `json:"class,omitempty"`

	// The turnstile (GPU) to use. Default "default".
	Turnstile string `json:"turnstile,omitempty"`

	// The image engine (by name) that image requests go to. Default: the
	// turnstile's first engine of the kind whose job route it is (each
	// kind's Routes.Jobs, docs/engines.md). Needed only with two
	// image engines of one kind. With engine_routes it may name an LLM
	// engine too.
	Engine string `json:"engine,omitempty"`

	// EngineRoutes guards only the routes of Engine's kind (an LLM
	// engine's model routes; ComfyUI's /prompt; A1111's /sdapi/v1/
	// jobs); every other request passes through: a POST /prompt to
	// Ollama is no image job. gpu_turnstile_proxy sets it, its
	// reverse_proxy going to that engine alone. Needs engine.
	EngineRoutes bool `json:"engine_routes,omitempty"`

	// DuringJob decides what an LLM request does when it would wait for a
	// running image job: "allow" lets it through as part of the job (its
	// model loads beside the job's: keep it small), "reject" answers at
	// once with 409 naming the cause. Unset, it waits like any other.
	// Meant for requests that ComfyUI's own nodes make during a job
	// (select them with a matcher): waiting would deadlock, the job
	// waiting for the LLM and the LLM for the job.
	DuringJob string `json:"during_job,omitempty"`

	// WaitNotice overrides the turnstile's wait_notice for this handler's
	// requests: "on" (every 5s), "off", or the interval between notices
	// to a streaming chat request that waits for the GPU. Unset, the
	// turnstile's applies.
	WaitNotice string `json:"wait_notice,omitempty"`

	class route.Class
	// notice is WaitNotice read (0: off), if noticeSet.
	notice    time.Duration
	noticeSet bool
	ts        *turnstile
	// routes is the kind whose routes are guarded, with engine_routes.
	routes route.EngineRoutes
	// guard and sampler check where guarded requests were proxied
	// (misroute.go); guard is the config's own.
	guard   *route.Guard
	sampler route.Sampler
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.gpu_turnstile",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision finds the turnstile.
func (h *Handler) Provision(ctx caddy.Context) error {
	c, err := route.ParseClass(h.Class)
	if err != nil {
		return fmt.Errorf("gpu_turnstile: %v", err)
	}
	h.class = c
	switch h.DuringJob {
	case "", "allow", "reject":
	default:
		return fmt.Errorf("gpu_turnstile: during_job %q is neither allow nor reject", h.DuringJob)
	}
	if h.WaitNotice != "" {
		if h.notice, err = tcfg.ParseWaitNotice(h.WaitNotice); err != nil {
			return fmt.Errorf("gpu_turnstile: %v", err)
		}
		h.noticeSet = true
	}
	var cfg *config
	if h.ts, cfg, err = lookupTurnstile(ctx, h.Turnstile); err != nil {
		return err
	}
	h.guard = cfg.Routes
	h.routes, err = cfg.HandlerEngine(h.ts.name, h.Engine, h.EngineRoutes)
	return err
}

// handledVar marks a request that a gpu_turnstile handler has taken care
// of, so that another one further down the chain lets it pass: with
// `gpu_turnstile @m passthrough` before a plain `gpu_turnstile`, the
// matched requests are not classified again.
const handledVar = "gpu_turnstile.handled"

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if caddyhttp.GetVar(r.Context(), handledVar) != nil {
		return next.ServeHTTP(w, r)
	}
	c := h.class
	if c == route.Auto {
		if c = tcfg.Routes.Classify(r); h.routes.Kind != "" {
			c = tcfg.Routes.Restrict(h.routes, c, r)
		}
	}
	// A passthrough found by auto mode holds nothing, so a later handler
	// may look again; any other decision is final.
	if c != route.Passthrough || h.class != route.Auto {
		caddyhttp.SetVar(r.Context(), handledVar, true)
	}
	var err error
	switch c {
	case route.LLM:
		err = h.serveLLM(w, r, next)
		h.checkRoute(r)
	case route.Image:
		err = h.serveImage(w, r, next)
		h.checkImageRoute(r)
	default:
		err = next.ServeHTTP(w, r)
	}
	return h.answerFailedForward(w, r, c, err)
}

// Interface guards
var (
	_ caddy.App                   = (*App)(nil)
	_ caddy.Provisioner           = (*App)(nil)
	_ caddy.CleanerUpper          = (*App)(nil)
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
