// Package llamaswaptest is a fake llama-swap (mostlygeek/llama-swap v250-5,
// 0bdb3720199f) that behaves as llama-swap does where the turnstile depends
// on it, with its default configuration (no groups: every model in one
// group that swaps and is exclusive, so one model runs at a time).
//
// It keeps these facts of llama-swap: a request on a model route (the
// model from a JSON body only when Content-Type says JSON, else from the
// form or query) starts its model's process on demand and waits for it;
// requests that arrive during a start share it; a request for another
// model queues, first come first served, until the running model's
// requests have drained, and then swaps (stop the running process, start
// the new one), while requests for the running model keep being served at
// once; a model takes at most ConcurrencyLimit requests (429 beyond);
// GET /running lists the processes not stopped, sorted; GET /v1/models says
// "loaded" for any of them; every unload route answers only after the
// processes have exited, cuts the requests they were serving (a stream just
// ends, without its [DONE]; an answer not begun is a 502 with no body),
// fails the requests waiting for them with 500 "unspecific error: group:
// model unloaded", kills a process still starting (it stays "starting",
// never "stopping", until it has exited), and leaves nothing to stop a
// later request from loading the model again. An unload that lands while
// a swap is stopping the old model does not cancel the swap's start: the
// new model starts as the unload answers, as in llama-swap, where the
// swap's goroutine goes on. Requests that arrive during an unload wait for
// it (llama-swap's run loop is busy stopping), then load their model again.
// The client's preference (Accept: text/plain or text/html) shapes error
// bodies as llama-swap's SendResponse does.
//
// Every process occupies the shared simulated GPU (service "llamaswap",
// "load MODEL") from its command's start until it has exited. The process
// itself is a stand-in for llama-server that the fake answers for: chat and
// text completions (SSE when "stream":true), embeddings, /health, /v1/models
// and /; other paths get llama-server's 404.
package llamaswaptest

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// service is the fake's name on the simulated GPU's timeline.
const service = "llamaswap"

// Options shape the fake's configuration and timing.
type Options struct {
	// Models are the configured models (the config's "models" keys).
	// Default: "qwen3-8b", "gemma-3-4b".
	Models []string
	// StartDelay is the time from a process's command start until its
	// health check passes. llama-swap waits 250ms, then checks every
	// second; the fake folds that into this one delay. Default 30ms.
	StartDelay time.Duration
	// StopDelay is the time from SIGTERM until the process has exited.
	// Default 20ms.
	StopDelay time.Duration
	// Tokens is how many tokens a generation streams. Default 5.
	Tokens int
	// TokenDelay is the time between two tokens. Default 2ms.
	TokenDelay time.Duration
	// ConcurrencyLimit is how many requests one model takes at once,
	// waiting or served; more get 429. Default 10, llama-swap's default.
	ConcurrencyLimit int
	// ModelBytes is what each model's process charges to the simulated
	// GPU from its start until it has exited. Default 0.
	ModelBytes int64
	// APIKey, if set, is the config's apiKeys: /running and the unload
	// routes then answer 401 without it (see auth.go).
	APIKey string

	// Processes, if set, makes the fake's processes real (see
	// life.go): llama-swap is a front process on the fake's port, and
	// each model's server its child, in a process group of its own,
	// listening on the port /running gives as its proxy and charged to
	// the GPU for as long as it lives. The test's cleanup ends them all.
	// Nil: everything runs in the test process.
	Processes testing.TB
	// Setsid starts the front in a session of its own, as a systemd
	// service's llama-swap (with Processes).
	Setsid bool
	// DrainLimit bounds Terminate's drain of the requests in flight.
	// Default 30s, llama-swap's.
	DrainLimit time.Duration
	// Wrapper starts each model's server through a shell, as a cmd that
	// is a script does (with Processes): the unload answers once the
	// shell has exited, while its child, which holds the model, lives on
	// Linger more.
	Wrapper bool
	Linger  time.Duration
}

// Server is a running fake llama-swap.
type Server struct {
	srv  *fakeserver.Server
	gpu  *gputest.GPU
	opts Options
	ctx  context.Context // ends at Close, releasing every wait

	procs  map[string]*process // fixed at construction
	models []string            // sorted

	// The scheduler's state, owned by whoever holds loop (see scheduler.go).
	loop     chan struct{}
	active   map[string]*swap
	queued   []*waiter
	reserved map[string]int
	inFlight map[string]int

	requests atomic.Int64
	starts   atomic.Int64
	unloads  atomic.Int64
	chats    fakeserver.Gate

	life *life // with Options.Processes: the front, and this llama-swap's life
}

// NewServer starts a fake llama-swap on a loopback port.
func NewServer(gpu *gputest.GPU, opts Options) *Server {
	s := newServer(gpu, opts)
	if opts.Processes != nil {
		s.startFront(opts.Processes)
	}
	return s
}

// newServer starts the in-process side of a fake llama-swap.
func newServer(gpu *gputest.GPU, opts Options) *Server {
	if len(opts.Models) == 0 {
		opts.Models = []string{"qwen3-8b", "gemma-3-4b"}
	}
	fakeserver.Default(&opts.StartDelay, 30*time.Millisecond)
	fakeserver.Default(&opts.StopDelay, 20*time.Millisecond)
	fakeserver.Default(&opts.Tokens, fakeserver.Tokens)
	fakeserver.Default(&opts.TokenDelay, fakeserver.TokenDelay)
	fakeserver.Default(&opts.ConcurrencyLimit, 10)
	s := &Server{
		gpu: gpu, opts: opts, procs: map[string]*process{},
		loop: make(chan struct{}, 1), active: map[string]*swap{},
		reserved: map[string]int{}, inFlight: map[string]int{},
	}
	for i, m := range opts.Models {
		s.procs[m] = &process{s: s, model: m, port: 5800 + i, state: stateStopped}
		s.models = append(s.models, m)
	}
	sort.Strings(s.models)
	s.srv = fakeserver.Start(s.routes())
	s.ctx = s.srv.Context()
	return s
}

// URL returns the fake's base URL: its front's with Options.Processes.
func (s *Server) URL() string {
	if s.life != nil {
		return s.life.front.URL()
	}
	return s.srv.URL()
}

// Close shuts the fake down and ends its processes; with
// Options.Processes, those of every llama-swap it ran that still runs
// (the test's cleanup kills the rest).
func (s *Server) Close() {
	if s.life == nil {
		s.close()
		return
	}
	s.life.mu.Lock()
	all := s.life.all
	s.life.mu.Unlock()
	for _, l := range all {
		l.close()
	}
}

// close shuts one llama-swap down.
func (s *Server) close() {
	s.srv.Cut()
	var wg sync.WaitGroup
	for _, p := range s.procs {
		wg.Go(p.stop)
	}
	wg.Wait()
}

// Requests counts the requests that arrived on model routes and on
// /upstream/, whatever became of them.
func (s *Server) Requests() int64 { return s.current().requests.Load() }

// Starts counts process starts (commands run).
func (s *Server) Starts() int64 { return s.current().starts.Load() }

// Unloads counts the calls of the three unload routes.
func (s *Server) Unloads() int64 { return s.current().unloads.Load() }

// State returns a model's process state: "stopped", "starting", "ready"
// or "stopping"; "" for a model that is not configured.
func (s *Server) State(model string) string {
	p := s.current().procs[model]
	if p == nil {
		return ""
	}
	return p.State()
}

// HoldChats makes every generation wait, after its first token, until the
// returned function is called.
func (s *Server) HoldChats() (resume func()) { return s.current().chats.Hold() }

// modelPostRoutes are llama-swap's model-routed POST routes (JSON body,
// or a form for the audio transcription and image edit routes).
var modelPostRoutes = []string{
	"/v1/chat/completions", "/v1/responses", "/v1/completions", "/v1/messages",
	"/v1/messages/count_tokens", "/v1/embeddings", "/reranking", "/rerank",
	"/v1/rerank", "/v1/reranking", "/infill", "/completion", "/v1/audio/speech",
	"/v1/audio/voices", "/v1/images/generations", "/sdapi/v1/txt2img",
	"/sdapi/v1/img2img", "/audioapi/v1/tasks/run",
	"/v/chat/completions", "/v/responses", "/v/completions", "/v/messages",
	"/v/messages/count_tokens", "/v/embeddings", "/v/rerank", "/v/reranking",
	"/v1/audio/transcriptions", "/v1/images/edits",
}

// modelGetRoutes are the model-routed GET routes (the model in ?model=).
var modelGetRoutes = []string{"/v1/audio/voices", "/sdapi/v1/loras", "/props"}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, p := range modelPostRoutes {
		mux.HandleFunc("POST "+p, s.modelRoute)
	}
	for _, p := range modelGetRoutes {
		mux.HandleFunc("GET "+p, s.modelRoute)
	}
	mux.HandleFunc("GET /v1/models", s.listModels)
	mux.HandleFunc("GET /models", s.listModels)
	mux.HandleFunc("GET /health", health)
	mux.HandleFunc("GET /wol-health", health)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui", http.StatusFound)
	})
	mux.HandleFunc("GET /unload", s.guard(s.legacyUnload))
	mux.HandleFunc("GET /running", s.guard(s.running))
	mux.HandleFunc("GET /upstream", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/models", http.StatusFound)
	})
	mux.HandleFunc("/upstream/{upstreamPath...}", s.upstream)
	mux.HandleFunc("POST /api/models/unload", s.guard(s.unloadAllRoute))
	mux.HandleFunc("POST /api/models/unload/{model...}", s.guard(s.unloadModelRoute))
	return mux
}
