// Package ollamatest is a fake Ollama server that behaves as Ollama v0.17.4
// does where the turnstile depends on it: model routes that load a model
// and stream NDJSON or SSE, a blocking warm-up, /api/ps, and the routes that
// need no GPU. It keeps Ollama's awkward facts too: a loading model is not
// listed in /api/ps, keep_alive 0 during a load is ignored, a request with
// its own keep_alive cancels a pending unload, a load whose client went away
// is aborted but its runner holds memory a while longer, requests on one
// model queue at OLLAMA_NUM_PARALLEL=1, and a killed server leaves its
// runners behind. Every runner occupies the shared simulated GPU from the
// start of its load until it exits, so tests can check that the GPU was
// never shared, and charges its model's size to it. On a GPU with a size,
// a model that does not fit makes Ollama unload its other models first,
// and loads partly offloaded to the CPU when it still does not fit, as
// Ollama's scheduler does.
package ollamatest

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
)

// Options shape the fake's timing and library.
type Options struct {
	// Models is the library; requests for other models get 404.
	// Default: llama3.2, qwen3:8b, nomic-embed-text.
	Models []string
	// LoadDelay is how long a model takes to load. Default 20ms.
	LoadDelay time.Duration
	// UnloadDelay is how long a runner takes to exit after an unload
	// before the model leaves /api/ps. Default 20ms.
	UnloadDelay time.Duration
	// Tokens is how many tokens a generation streams. Default 5.
	Tokens int
	// TokenDelay is the time between two streamed tokens. Default 2ms.
	TokenDelay time.Duration
	// SizeVRAM is the size of a model that ModelSizes does not list.
	// Default 5 GiB.
	SizeVRAM int64
	// ModelSizes is each model's size (its weights and KV cache, what
	// /api/ps reports as size), by name as requested or normalised. A
	// loaded model charges it to the simulated GPU (or, partly
	// offloaded, the part on the GPU, its size_vram).
	ModelSizes map[string]int64
	// MinimumVRAM is what Ollama leaves free on the card beside a model's
	// layers (ml.DeviceInfo.MinimumMemory: 457 MiB on CUDA), so a model
	// fits only in size + MinimumVRAM of free memory. It matters only when
	// the GPU has a size (gputest.GPU.SetMemory). Default 457 MiB;
	// negative: none.
	MinimumVRAM int64
	// SystemMemory is the system memory (free RAM and swap) that the part
	// of a model offloaded to the CPU may take; a load whose CPU part is
	// larger fails with Ollama's 500 "model requires more system memory
	// (X) than is available (Y)". Default 0: unlimited.
	SystemMemory int64
	// OOM lists models (as requested or normalised) whose load fails as
	// a runner's does when cudaMalloc fails: after LoadDelay the runner
	// exits and the requests waiting for the load get 500
	// {"error":"llama runner process has terminated: cudaMalloc failed: out of memory"}.
	OOM map[string]bool
	// VRAMLag is how long video memory stays in use after a model has
	// left /api/ps, as with real drivers (up to ~5 s). Default 0.
	VRAMLag time.Duration
	// Parallel is OLLAMA_NUM_PARALLEL: how many requests one model serves
	// at once; the rest queue inside the server. Default 1, as in Ollama
	// v0.17.4.
	Parallel int
	// AbortDelay is how long a runner lives, holding its memory, after a
	// load is aborted because its client went away. Default 300ms.
	AbortDelay time.Duration
	// RunnerProcesses gives every runner a real process, named and
	// parameterised like Ollama's (`ollama runner --model M`), with the
	// server's address in its OLLAMA_HOST, so that process checks find it.
	RunnerProcesses bool
}

// Version is the Ollama version the fake answers /api/version with.
const Version = "0.17.4"

// Server is a running fake Ollama.
type Server struct {
	*httptest.Server
	gpu  *gputest.GPU
	opts Options

	mu      sync.Mutex
	library map[string]bool
	sizes   map[string]int64 // Options.ModelSizes, by normalised name
	oom     map[string]bool  // Options.OOM, by normalised name
	models  map[string]*model
	runners map[*runner]bool
	killed  bool

	inflight atomic.Int64
	requests atomic.Int64
	unloads  atomic.Int64
	warmups  atomic.Int64
	psStatus atomic.Int64 // nonzero: /api/ps answers this status
	stuck    atomic.Bool  // unload requests are accepted but never done
	undone   atomic.Bool  // NDJSON streams end on a "done":false line
	chats    fakeserver.Gate
}

// NewServer starts a fake Ollama on a loopback port.
func NewServer(gpu *gputest.GPU, opts Options) *Server {
	s := NewUnstarted(gpu, opts)
	s.Start()
	return s
}

// NewUnstarted returns a fake whose listener is not started yet, so the
// caller may set s.Listener first (the demo uses fixed ports).
func NewUnstarted(gpu *gputest.GPU, opts Options) *Server {
	if len(opts.Models) == 0 {
		opts.Models = []string{"llama3.2", "qwen3:8b", "nomic-embed-text"}
	}
	fakeserver.Default(&opts.LoadDelay, 20*time.Millisecond)
	fakeserver.Default(&opts.UnloadDelay, 20*time.Millisecond)
	fakeserver.Default(&opts.Tokens, fakeserver.Tokens)
	fakeserver.Default(&opts.TokenDelay, fakeserver.TokenDelay)
	fakeserver.Default(&opts.SizeVRAM, 5<<30)
	fakeserver.Default(&opts.Parallel, 1)
	fakeserver.Default(&opts.AbortDelay, 300*time.Millisecond)
	fakeserver.Default(&opts.MinimumVRAM, 457<<20)
	s := &Server{gpu: gpu, opts: opts, library: map[string]bool{}, models: map[string]*model{}, runners: map[*runner]bool{},
		sizes: map[string]int64{}, oom: map[string]bool{}}
	for _, m := range opts.Models {
		s.library[ollama.NormalizeName(m)] = true
	}
	for m, size := range opts.ModelSizes {
		s.sizes[ollama.NormalizeName(m)] = size
	}
	for m, fails := range opts.OOM {
		s.oom[ollama.NormalizeName(m)] = fails
	}
	s.Server = httptest.NewUnstartedServer(s.routes())
	return s
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.root)
	mux.HandleFunc("HEAD /{$}", s.root)
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]string{"version": Version})
	})
	mux.HandleFunc("GET /api/tags", s.tags)
	mux.HandleFunc("GET /api/ps", s.ps)
	mux.HandleFunc("POST /api/show", s.show)
	mux.HandleFunc("POST /api/generate", s.generate)
	mux.HandleFunc("POST /api/chat", s.generate)
	mux.HandleFunc("POST /api/embed", s.embed)
	mux.HandleFunc("POST /api/embeddings", s.embed)
	mux.HandleFunc("POST /v1/chat/completions", s.openAI)
	mux.HandleFunc("POST /v1/completions", s.openAI)
	mux.HandleFunc("POST /v1/embeddings", s.openAI)
	mux.HandleFunc("POST /v1/responses", s.openAI)
	mux.HandleFunc("POST /v1/messages", s.openAI)
	mux.HandleFunc("GET /v1/models", s.v1Models)
	for _, p := range []string{"/api/generate", "/api/chat", "/api/embed", "/api/embeddings", "/api/show",
		"/v1/chat/completions", "/v1/completions", "/v1/embeddings"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "405 method not allowed", http.StatusMethodNotAllowed)
		})
	}
	return mux
}

// Close shuts the server down and ends its runners.
func (s *Server) Close() {
	s.Server.Close()
	s.KillRunners()
}

// SetStreamsUndone makes NDJSON streams end on a "done":false line, as
// when Ollama stops a generation itself (its repeat guard).
func (s *Server) SetStreamsUndone(undone bool) { s.undone.Store(undone) }

// Requests counts the model requests (generate, chat, embed, /v1) served.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Inflight is the number of model requests being served now.
func (s *Server) Inflight() int64 { return s.inflight.Load() }

// Unloads counts unload requests (keep_alive 0 with no prompt).
func (s *Server) Unloads() int64 { return s.unloads.Load() }

// Warmups counts warm-up requests (no prompt).
func (s *Server) Warmups() int64 { return s.warmups.Load() }

// SetPSStatus makes /api/ps answer status (0 restores normal answers).
func (s *Server) SetPSStatus(status int) { s.psStatus.Store(int64(status)) }

// SetUnloadStuck makes unloads be accepted but never carried out, as when
// a runner hangs.
func (s *Server) SetUnloadStuck(stuck bool) { s.stuck.Store(stuck) }

// HoldChats makes every generation wait, after it has loaded and sent its
// first token, until the returned function is called.
func (s *Server) HoldChats() (resume func()) { return s.chats.Hold() }

// Loaded lists the models loaded or loading now (not aborted loads).
func (s *Server) Loaded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for n := range s.models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// size is a model's size: Options.ModelSizes, or SizeVRAM.
func (s *Server) size(name string) int64 {
	if n, ok := s.sizes[name]; ok {
		return n
	}
	return s.opts.SizeVRAM
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	fakeserver.WriteJSON(w, status, fakeserver.JSONUTF8, v)
}
