// Package vllmtest is a fake vLLM OpenAI-compatible server (the v1 engine)
// that behaves as vLLM does where the turnstile depends on it: its sleep
// mode.
//
// It keeps these facts of vLLM: the weights are loaded at start-up (the
// HTTP server comes up only after them), so the fake occupies the shared
// simulated GPU (service "vllm", "weights MODEL") from NewServer on; the
// sleep routes exist only with VLLM_SERVER_DEV_MODE=1 (404 otherwise);
// POST /sleep reads level and mode from the query (defaults 1 and abort),
// ignores the body, and answers 200 with an empty body only once the engine
// sleeps: level 0 pauses scheduling and keeps the memory, levels 1 and 2
// free it; mode abort ends the requests in flight, wait lets them finish
// first, keep pauses them and resumes them after the wake. An aborted
// request is finished, not cut: vLLM's scheduler ends it with
// FINISHED_ABORTED, so its answer is still a 200, ending with
// finish_reason "abort" (then [DONE] for a stream). The sheet does not say
// this; it is read from vLLM's engine (pause_scheduler) and its clients. Requests that arrive while
// it is paused or asleep are accepted and queued, hanging until
// POST /wake_up, which answers 200 empty once the memory is back
// (re-occupying the GPU: "wake"); vLLM never wakes by itself. Scheduling
// resumes only when every tag (weights, kv_cache) is awake. GET /is_sleeping
// answers {"is_sleeping":B}, true while any tag sleeps or scheduling is
// paused.
//
// After a level-2 sleep the weights come back empty: the fake then answers
// requests with garbage ("!" tokens), as a model with discarded weights
// does, until POST /collective_rpc {"method":"reload_weights"}.
package vllmtest

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/proctest"
)

// service is the fake's name on the simulated GPU's timeline.
const service = "vllm"

// Options shape the fake's configuration and timing.
type Options struct {
	// Model is the served model. Default "Qwen/Qwen3-8B".
	Model string
	// NoDevMode leaves VLLM_SERVER_DEV_MODE unset: /sleep, /wake_up,
	// /is_sleeping and /collective_rpc are 404.
	NoDevMode bool
	// SleepDelay is how long a level-1 or level-2 sleep takes to free the
	// memory once in-flight requests are dealt with. Default 20ms.
	SleepDelay time.Duration
	// WakeDelay is how long a wake takes to bring the memory back.
	// Default 30ms.
	WakeDelay time.Duration
	// Tokens is how many tokens a generation streams. Default 5.
	Tokens int
	// TokenDelay is the time between two tokens. Default 2ms.
	TokenDelay time.Duration
	// JSONSleepAnswer answers /sleep with a JSON body, as some builds do,
	// instead of an empty one.
	JSONSleepAnswer bool
	// ModelBytes is what the engine's memory (weights and KV cache)
	// charges to the simulated GPU while it is on it: from the start
	// until a level-1 or level-2 sleep, and again from a wake. Default 0.
	// (A real sleeping vLLM keeps a few GB; the fake keeps nothing, but
	// SleepResidue with Processes.)
	ModelBytes int64
	// APIKey is --api-key: every /v1 route then answers 401 without it;
	// /health and the sleep routes stay open (see auth.go).
	APIKey string

	// Processes, if set, makes the fake's processes real (see
	// processes.go): the API server is a front process on the fake's
	// port, and the memory is charged to its engine-core child
	// ("VLLM::EngineCore"), started at launch, for as long as that
	// process lives. The test's cleanup ends them all. Nil: everything
	// runs in the test process.
	Processes testing.TB
	// Setsid starts the API server in a session of its own, as a
	// systemd service's vLLM (with Processes).
	Setsid bool
	// SleepResidue is what a level-1 or level-2 sleep leaves on the card
	// (CUDA context, graph pools), charged to the engine core with
	// Processes; asleep, it is no occupancy (gputest's Charge.Idle).
	// Default 0.
	SleepResidue int64
}

// Server is a running fake vLLM.
type Server struct {
	srv  *fakeserver.Server
	gpu  *gputest.GPU
	opts Options
	ctx  context.Context // ends at Close, releasing every wait

	eng engine

	requests atomic.Int64
	sleeps   atomic.Int64
	wakes    atomic.Int64
	chats    fakeserver.Gate

	life   *lives          // with Options.Processes: the API server's processes
	worker *proctest.Child // its engine core (Options.Processes)
	charge *gputest.Charge // the engine core's memory on the GPU
}

// NewServer starts a fake vLLM on a loopback port, its weights loaded.
func NewServer(gpu *gputest.GPU, opts Options) *Server {
	s := newServer(gpu, opts)
	if s.opts.Processes != nil {
		s.startFront(s.opts.Processes)
	}
	s.launch()
	return s
}

// newServer starts the in-process side of a fake vLLM, its memory not
// yet on the card (launch).
func newServer(gpu *gputest.GPU, opts Options) *Server {
	if opts.Model == "" {
		opts.Model = "Qwen/Qwen3-8B"
	}
	fakeserver.Default(&opts.SleepDelay, 20*time.Millisecond)
	fakeserver.Default(&opts.WakeDelay, 30*time.Millisecond)
	fakeserver.Default(&opts.Tokens, fakeserver.Tokens)
	fakeserver.Default(&opts.TokenDelay, fakeserver.TokenDelay)
	s := &Server{gpu: gpu, opts: opts}
	s.eng = engine{s: s, running: map[*request]bool{}, changed: make(chan struct{})}
	s.srv = fakeserver.Start(s.routes())
	s.ctx = s.srv.Context()
	return s
}

// URL returns the fake's base URL: its API server process's with
// Options.Processes.
func (s *Server) URL() string {
	if s.life != nil {
		return s.life.front.URL()
	}
	return s.srv.URL()
}

// Close shuts the fake down; its memory is freed with the process (with
// Options.Processes, the engine cores of every API server it ran are
// killed).
func (s *Server) Close() {
	for _, l := range s.lives() {
		l.srv.Cut()
		if l.worker != nil {
			l.worker.Kill()
		}
		l.eng.exit()
	}
}

// Requests counts the model requests (chat, completions, embeddings)
// received, queued or not.
func (s *Server) Requests() int64 { return s.current().requests.Load() }

// Sleeps counts POST /sleep calls.
func (s *Server) Sleeps() int64 { return s.current().sleeps.Load() }

// Wakes counts POST /wake_up calls.
func (s *Server) Wakes() int64 { return s.current().wakes.Load() }

// Sleeping is what /is_sleeping answers now.
func (s *Server) Sleeping() bool { return s.current().eng.isSleeping() }

// Queued is the number of requests held because scheduling is paused.
func (s *Server) Queued() int { return s.current().eng.queuedNow() }

// HoldChats makes every generation wait, after its first token, until the
// returned function is called (a sleep in abort mode still ends it).
func (s *Server) HoldChats() (resume func()) { return s.current().chats.Hold() }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/chat/completions", s.modelRoute)
	mux.HandleFunc("POST /v1/completions", s.modelRoute)
	mux.HandleFunc("POST /v1/embeddings", s.modelRoute)
	if !s.opts.NoDevMode {
		mux.HandleFunc("POST /sleep", s.sleep)
		mux.HandleFunc("POST /wake_up", s.wakeUp)
		mux.HandleFunc("GET /is_sleeping", s.isSleeping)
		mux.HandleFunc("POST /collective_rpc", s.collectiveRPC)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	})
	return s.guard(mux)
}

// models is GET /v1/models: the one served model.
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{{
		"id": s.opts.Model, "object": "model", "created": time.Now().Unix(), "owned_by": "vllm",
		"root": s.opts.Model, "parent": nil, "max_model_len": 40960,
	}}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	fakeserver.WriteJSON(w, status, fakeserver.JSON, v)
}
