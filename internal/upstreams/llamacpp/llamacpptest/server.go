// Package llamacpptest is a fake llama.cpp llama-server that behaves as
// engines-api.md (section 1) says the real one does where the turnstile
// depends on it. By default it is a router (no -m): models_dir models, one
// simulated child process per loaded model, GET /models with llama.cpp's
// entry shape, POST /models/load that answers while the model still loads
// and first evicts the least recently used model (waiting for its exit) at
// --models-max, POST /models/unload that answers at once while the child
// exits later (at once, killed, if it was still loading), autoload of
// unloaded models by the model routes, and llama.cpp's error envelopes and
// messages. With Options.Single it is a single-model server (-m): every
// route answers 503 "Loading model" until the model has loaded, there is no
// route to unload, and --sleep-idle-seconds frees the model after an idle
// time, the next request waiting for a full reload.
//
// Some facts come from the llama.cpp source rather than the sheet, and are
// as unkind: a child killed while loading, or at its stop-timeout, exits
// non-zero, so its model turns unloaded with failed:true; a request
// forwarded without autoload to a child still loading gets the child's 503
// "Loading model"; and a request whose child fails it gets the router's
// 500 "proxy error: ...", or, if the child's answer had begun, a relayed
// stream that just ends. When a child told to exit stops taking requests
// and generating is UNVERIFIED; the fake stops both at once and cuts the
// answers in progress when the child exits.
//
// Each child occupies the shared simulated GPU (service "llamacpp") from
// its spawn until its process has exited, and a sleeping model occupies
// nothing, so tests can check that the GPU was never shared.
package llamacpptest

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// service is the fake's name on the simulated GPU.
const service = "llamacpp"

// Options shape the fake's models, flags and timing.
type Options struct {
	// Models are the router's models (source "models_dir"). Default
	// "qwen3-8b", "gemma-3-4b".
	Models []string
	// LoadDelay is how long a model takes to load: from the child's spawn
	// to "loaded", and a wake from sleep. Default 30ms.
	LoadDelay time.Duration
	// LoadDelays are the load times of some models, where they differ
	// from LoadDelay (a child's first load; a wake takes LoadDelay).
	LoadDelays map[string]time.Duration
	// StopDelay is how long a child takes to exit after an unload has
	// been answered; its status turns "unloaded" then. Default 30ms
	// (real children: up to StopTimeout).
	StopDelay time.Duration
	// StopTimeout is the preset's stop-timeout: a child that has not
	// exited StopTimeout after its unload is killed, and its status turns
	// unloaded with failed:true. Default 10s, as in llama.cpp.
	StopTimeout time.Duration
	// Tokens is how many tokens a generation produces. Default 5.
	Tokens int
	// TokenDelay is the time between two tokens. Default 2ms.
	TokenDelay time.Duration
	// ModelsMax is --models-max: how many children may run at once.
	// 0 means llama.cpp's default, 4; a negative value means
	// --models-max 0, no limit (then /props shows max_instances 0).
	ModelsMax int
	// NoAutoload is --no-models-autoload: a model route does not load an
	// unloaded model (a request's ?autoload=true still does).
	NoAutoload bool
	// LoadOnStart are models whose preset sets load-on-startup (their
	// source is "preset"). As in llama.cpp, more of them than the
	// --models-max value (0 included) is a startup error: NewServer
	// panics.
	LoadOnStart []string
	// Single, if set, makes the fake a single-model server (-m) for this
	// model: no router routes, and its load starts with the server.
	Single string
	// SleepIdle is --sleep-idle-seconds: a loaded model with no task for
	// this long frees its memory (its process stays). 0 is off. The
	// router passes its flags to every child, so in router mode it
	// applies to each child.
	SleepIdle time.Duration
	// ModelBytes is what each loaded model (each child) charges to the
	// simulated GPU while its memory is in use: from its spawn until it
	// exits or sleeps, and again from its wake. Default 0.
	ModelBytes int64
	// APIKey is --api-key: POST /models/load and /models/unload then
	// answer 401 without it (see auth.go).
	APIKey string

	// Processes, if set, makes the router's processes real (see
	// processes.go): the router is a front process on the fake's port,
	// and each loaded model a child of it that exits when its standard
	// input closes, once its load (LoadDelay) has ended, charged to the
	// GPU for as long as it lives. Router mode only. The test's cleanup
	// ends them all. Nil: everything runs in the test process.
	Processes testing.TB
	// Setsid starts the router in a session of its own, as a systemd
	// service's llama-server (with Processes).
	Setsid bool
}

// Server is a running fake llama-server.
type Server struct {
	srv    *fakeserver.Server
	gpu    *gputest.GPU
	opts   Options
	single *model // the model of a single-model server; nil for a router
	max    int    // --models-max as given; 0: no limit
	routes map[string]http.HandlerFunc

	mu       sync.Mutex
	models   map[string]*model // fixed at start; their fields are guarded by mu
	ids      []string          // sorted, as llama.cpp's std::map lists them
	tick     int64             // LRU clock: a load or a POST request
	port     int               // the last child's port
	failNext map[string]bool
	changed  chan struct{} // closed at every status change
	closed   bool
	done     chan struct{} // closed when the process ends

	requests atomic.Int64
	loads    atomic.Int64
	unloads  atomic.Int64
	chats    fakeserver.Gate

	life *lives // with Options.Processes: the router's processes
}

// NewServer starts a fake llama-server on a loopback port. It panics
// where llama-server would refuse to start.
func NewServer(gpu *gputest.GPU, opts Options) *Server {
	s := newServer(gpu, opts)
	if opts.Processes != nil {
		s.startFront(opts.Processes)
	}
	s.start()
	return s
}

// newServer starts the in-process side of a fake llama-server, nothing
// loaded yet.
func newServer(gpu *gputest.GPU, opts Options) *Server {
	opts = withDefaults(opts)
	s := &Server{gpu: gpu, opts: opts, models: map[string]*model{}, failNext: map[string]bool{},
		changed: make(chan struct{}), done: make(chan struct{}), port: 39000}
	switch {
	case opts.ModelsMax > 0:
		s.max = opts.ModelsMax
	case opts.ModelsMax == 0:
		s.max = 4
	}
	if opts.Single != "" {
		s.single = s.addModel(opts.Single, "")
		s.routes = s.singleRoutes()
	} else {
		for _, id := range opts.Models {
			s.addModel(id, "models_dir")
		}
		s.routes = s.routerRoutes()
	}
	slices.Sort(s.ids)
	s.checkStartup()
	s.srv = fakeserver.Start(http.HandlerFunc(s.serveHTTP))
	return s
}

func withDefaults(opts Options) Options {
	if len(opts.Models) == 0 {
		opts.Models = []string{"qwen3-8b", "gemma-3-4b"}
	}
	fakeserver.Default(&opts.LoadDelay, 30*time.Millisecond)
	fakeserver.Default(&opts.StopDelay, 30*time.Millisecond)
	fakeserver.Default(&opts.StopTimeout, 10*time.Second)
	fakeserver.Default(&opts.Tokens, fakeserver.Tokens)
	fakeserver.Default(&opts.TokenDelay, fakeserver.TokenDelay)
	return opts
}

func (s *Server) addModel(id, source string) *model {
	if s.models[id] != nil {
		panic(fmt.Sprintf("model '%s' appears multiple times", id))
	}
	m := &model{id: id, source: source, status: statusUnloaded}
	s.models[id] = m
	s.ids = append(s.ids, id)
	return m
}

// checkStartup refuses what llama-server refuses at startup. Its check
// compares with the --models-max value, so that 0 (no limit) refuses any
// load-on-startup model.
func (s *Server) checkStartup() {
	if s.single != nil {
		return
	}
	if len(s.opts.LoadOnStart) > s.max {
		panic(fmt.Sprintf("number of models to load on startup (%d) exceeds models_max (%d)", len(s.opts.LoadOnStart), s.max))
	}
	for _, id := range s.opts.LoadOnStart {
		if s.models[id] == nil {
			panic(fmt.Sprintf("llamacpptest: load-on-startup model %q is not among Models", id))
		}
		s.models[id].source = "preset"
	}
}

// start loads what llama-server loads at startup: the single model, or
// the router's load-on-startup presets.
func (s *Server) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.single != nil {
		s.spawnLocked(s.single)
		return
	}
	for _, id := range s.opts.LoadOnStart {
		if m := s.models[id]; m.status == statusUnloaded {
			s.spawnLocked(m) // within models_max: nothing to evict
		}
	}
}

// serveHTTP dispatches as llama.cpp's HTTP server does: a single-model
// server that is loading answers everything with 503; an unknown path, or
// a known one with another method, is 404 "File Not Found".
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if s.single != nil && s.Status(s.single.id) == statusLoading {
		writeLoading(w, r)
		return
	}
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	h := s.routes[method+" "+r.URL.Path]
	if h == nil {
		writeError(w, http.StatusNotFound, "File Not Found")
		return
	}
	h(w, r)
}

// loadDelay is how long model id's child takes to load.
func (s *Server) loadDelay(id string) time.Duration {
	if d, ok := s.opts.LoadDelays[id]; ok {
		return d
	}
	return s.opts.LoadDelay
}

// URL returns the server's base URL: its router process's with
// Options.Processes.
func (s *Server) URL() string {
	if s.life != nil {
		return s.life.front.URL()
	}
	return s.srv.URL()
}

// Close ends every child and shuts the server down; with
// Options.Processes, those of every router it ran that still runs (the
// test's cleanup kills the rest).
func (s *Server) Close() {
	for _, l := range s.lives() {
		l.shutdown("server closed")
		l.srv.Cut()
	}
}

// Requests counts the requests on the model routes (POST) that reached a
// model's process.
func (s *Server) Requests() int64 { return s.current().requests.Load() }

// Loads counts model loads: child spawns, and in single-model mode also
// the reloads after sleep.
func (s *Server) Loads() int64 { return s.current().loads.Load() }

// Unloads counts the unloads the router accepted (POST /models/unload
// answered 200).
func (s *Server) Unloads() int64 { return s.current().unloads.Load() }

// Status returns a model's status value now: "unloaded", "loading",
// "loaded" or "sleeping" ("" for a model the server does not have).
func (s *Server) Status(model string) string {
	s = s.current()
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.models[model]; m != nil {
		return m.status
	}
	return ""
}

// HoldChats makes every generation wait, once its process has accepted it
// and produced its first token, until the returned function is called.
func (s *Server) HoldChats() (resume func()) { return s.current().chats.Hold() }

// FailNextLoad makes the next load of model fail: its child exits with
// code 1 at the end of the load, and the model turns unloaded with
// failed:true and exit_code 1. A single-model server whose load or reload
// fails aborts: its port refuses connections from then on.
func (s *Server) FailNextLoad(model string) {
	s = s.current()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext[model] = true
}
