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
// never shared.
package ollamatest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// SizeVRAM is the size each loaded model reports. Default 5 GiB.
	SizeVRAM int64
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
	chatGate atomic.Pointer[chan struct{}]
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
	if opts.LoadDelay == 0 {
		opts.LoadDelay = 20 * time.Millisecond
	}
	if opts.UnloadDelay == 0 {
		opts.UnloadDelay = 20 * time.Millisecond
	}
	if opts.Tokens == 0 {
		opts.Tokens = 5
	}
	if opts.TokenDelay == 0 {
		opts.TokenDelay = 2 * time.Millisecond
	}
	if opts.SizeVRAM == 0 {
		opts.SizeVRAM = 5 << 30
	}
	if opts.Parallel == 0 {
		opts.Parallel = 1
	}
	if opts.AbortDelay == 0 {
		opts.AbortDelay = 300 * time.Millisecond
	}
	s := &Server{gpu: gpu, opts: opts, library: map[string]bool{}, models: map[string]*model{}, runners: map[*runner]bool{}}
	for _, m := range opts.Models {
		s.library[ollama.NormalizeName(m)] = true
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
func (s *Server) HoldChats() (resume func()) {
	ch := make(chan struct{})
	s.chatGate.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { s.chatGate.Store(nil); close(ch) }) }
}

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

func (s *Server) root(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, "Ollama is running")
}

func (s *Server) tags(w http.ResponseWriter, r *http.Request) {
	type tag struct {
		Name  string `json:"name"`
		Model string `json:"model"`
		Size  int64  `json:"size"`
	}
	tags := []tag{}
	for n := range s.library {
		tags = append(tags, tag{n, n, s.opts.SizeVRAM})
	}
	sort.Slice(tags, func(i, j int) bool { return tags[i].Name < tags[j].Name })
	writeJSON(w, 200, map[string]any{"models": tags})
}

func (s *Server) v1Models(w http.ResponseWriter, r *http.Request) {
	data := []map[string]any{}
	for n := range s.library {
		data = append(data, map[string]any{"id": n, "object": "model", "created": 0, "owned_by": "library"})
	}
	writeJSON(w, 200, map[string]any{"object": "list", "data": data})
}

func (s *Server) show(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	name := ollama.NormalizeName(req.Model + req.Name)
	if !s.library[name] {
		writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("model '%s' not found", req.Model+req.Name)})
		return
	}
	writeJSON(w, 200, map[string]any{"modelfile": "FROM " + name, "details": map[string]string{"format": "gguf"}})
}

func (s *Server) ps(w http.ResponseWriter, r *http.Request) {
	if st := s.psStatus.Load(); st != 0 {
		writeJSON(w, int(st), map[string]string{"error": "simulated failure"})
		return
	}
	s.mu.Lock()
	list := []map[string]any{}
	for _, m := range s.models {
		if !m.loaded {
			continue // a loading model is not listed (llama.cpp runner)
		}
		list = append(list, map[string]any{
			"name": m.name, "model": m.name, "size": s.opts.SizeVRAM, "digest": "sha256:fake",
			"details":    map[string]string{"format": "gguf", "family": "llama"},
			"expires_at": m.expires.UTC().Format(time.RFC3339Nano), "size_vram": s.opts.SizeVRAM,
			"context_length": 4096,
		})
	}
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"models": list})
}

// genRequest is the union of the fields of /api/generate and /api/chat.
type genRequest struct {
	Model     string           `json:"model"`
	Prompt    *string          `json:"prompt"`
	Messages  *json.RawMessage `json:"messages"`
	Stream    *bool            `json:"stream"`
	KeepAlive json.RawMessage  `json:"keep_alive"`
	Input     json.RawMessage  `json:"input"`
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	var req genRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]string{"error": "invalid request: " + err.Error()})
		return
	}
	keepAlive, err := parseKeepAlive(req.KeepAlive)
	if err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	name := ollama.NormalizeName(req.Model)
	if req.Model == "" {
		writeJSON(w, 400, map[string]string{"error": "model is required"})
		return
	}
	if !s.library[name] {
		writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("model '%s' not found", req.Model)})
		return
	}
	empty := (req.Prompt == nil || *req.Prompt == "") && (req.Messages == nil || string(*req.Messages) == "[]" || string(*req.Messages) == "null")
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if empty && keepAlive != nil && *keepAlive == 0 {
		s.unloads.Add(1)
		s.requestUnload(name)
		writeJSON(w, 200, map[string]any{"model": req.Model, "created_at": now, "response": "", "done": true, "done_reason": "unload"})
		return
	}
	done, err := s.admitRequest(r, name, keepAlive)
	if err != nil {
		return // client gone
	}
	defer done()
	if empty {
		s.warmups.Add(1)
		writeJSON(w, 200, map[string]any{"model": name, "created_at": now, "response": "", "done": true, "done_reason": "load"})
		return
	}
	s.requests.Add(1)
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	defer s.gpu.Mark("ollama", "done "+r.URL.Path+" "+name)
	chat := strings.HasSuffix(r.URL.Path, "/chat")
	chunk := func(tok string, last bool) map[string]any {
		m := map[string]any{"model": name, "created_at": time.Now().UTC().Format(time.RFC3339Nano), "done": last}
		if chat {
			m["message"] = map[string]string{"role": "assistant", "content": tok}
		} else {
			m["response"] = tok
		}
		if last {
			m["done_reason"] = "stop"
			m["eval_count"] = s.opts.Tokens
		}
		return m
	}
	if req.Stream != nil && !*req.Stream {
		s.generateTokens(r, nil)
		writeJSON(w, 200, chunk(strings.Repeat("tok ", s.opts.Tokens), true))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	enc := json.NewEncoder(w)
	s.generateTokens(r, func(i int) {
		enc.Encode(chunk(fmt.Sprintf("tok%d ", i), false))
		http.NewResponseController(w).Flush()
	})
	if s.undone.Load() {
		enc.Encode(chunk("", false))
		return
	}
	enc.Encode(chunk("", true))
}

// generateTokens paces a generation, calling emit for each token.
func (s *Server) generateTokens(r *http.Request, emit func(int)) {
	for i := range s.opts.Tokens {
		if i > 0 {
			select {
			case <-time.After(s.opts.TokenDelay):
			case <-r.Context().Done():
				return
			}
		}
		if emit != nil {
			emit(i)
		}
		if i == 0 {
			if gate := s.chatGate.Load(); gate != nil {
				select {
				case <-*gate:
				case <-r.Context().Done():
					return
				}
			}
		}
	}
}

func (s *Server) embed(w http.ResponseWriter, r *http.Request) {
	var req genRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	name := ollama.NormalizeName(req.Model)
	if !s.library[name] {
		writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("model %q not found, try pulling it first", req.Model)})
		return
	}
	keepAlive, err := parseKeepAlive(req.KeepAlive)
	if err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return
	}
	done, err := s.admitRequest(r, name, keepAlive)
	if err != nil {
		return // client gone
	}
	defer done()
	s.requests.Add(1)
	vec := []float64{0.1, 0.2, 0.3}
	if strings.HasSuffix(r.URL.Path, "/embeddings") {
		writeJSON(w, 200, map[string]any{"embedding": vec})
		return
	}
	writeJSON(w, 200, map[string]any{"model": name, "embeddings": [][]float64{vec}})
}

func (s *Server) openAI(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"message": err.Error(), "type": "invalid_request_error"}})
		return
	}
	name := ollama.NormalizeName(req.Model)
	if !s.library[name] {
		writeJSON(w, 404, map[string]any{"error": map[string]any{"message": fmt.Sprintf("model \"%s\" not found, try pulling it first", req.Model), "type": "api_error", "code": nil}})
		return
	}
	done, err := s.admitRequest(r, name, nil)
	if err != nil {
		return // client gone
	}
	defer done()
	s.requests.Add(1)
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	created := time.Now().Unix()
	switch r.URL.Path {
	case "/v1/embeddings":
		writeJSON(w, 200, map[string]any{"object": "list", "model": req.Model,
			"data":  []map[string]any{{"object": "embedding", "index": 0, "embedding": []float64{0.1, 0.2, 0.3}}},
			"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1}})
		return
	case "/v1/chat/completions":
	default:
		s.generateTokens(r, nil)
		writeJSON(w, 200, map[string]any{"id": "cmpl-1", "object": "text_completion", "created": created, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "text": "tok", "finish_reason": "stop"}}})
		return
	}
	if !req.Stream {
		s.generateTokens(r, nil)
		writeJSON(w, 200, map[string]any{"id": "chatcmpl-1", "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "message": map[string]string{"role": "assistant", "content": strings.Repeat("tok ", s.opts.Tokens)}, "finish_reason": "stop"}},
			"usage":   map[string]int{"prompt_tokens": 1, "completion_tokens": s.opts.Tokens, "total_tokens": s.opts.Tokens + 1}})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	bw := bufio.NewWriter(w)
	event := func(delta map[string]string, finish any) {
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": finish}}})
		fmt.Fprintf(bw, "data: %s\n\n", b)
		bw.Flush()
		http.NewResponseController(w).Flush()
	}
	s.generateTokens(r, func(i int) {
		event(map[string]string{"role": "assistant", "content": fmt.Sprintf("tok%d ", i)}, nil)
	})
	event(map[string]string{"role": "assistant", "content": ""}, "stop")
	fmt.Fprint(bw, "data: [DONE]\n\n")
	bw.Flush()
}

// admitRequest records a model request on the timeline and admits it on
// its model (see use).
func (s *Server) admitRequest(r *http.Request, name string, keepAlive *time.Duration) (done func(), err error) {
	s.gpu.Mark("ollama", "request "+r.URL.Path+" "+name)
	return s.use(r.Context(), name, keepAlive)
}

// parseKeepAlive reads keep_alive as Ollama does: a number is seconds, a
// string is a Go duration; a bare "-1" string is an error.
func parseKeepAlive(raw json.RawMessage) (*time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var n float64
	if err := json.Unmarshal(raw, &n); err == nil {
		d := time.Duration(n * float64(time.Second))
		return &d, nil
	}
	var str string
	if err := json.Unmarshal(raw, &str); err != nil {
		return nil, fmt.Errorf("invalid keep_alive: %s", raw)
	}
	d, err := time.ParseDuration(str)
	if err != nil {
		return nil, fmt.Errorf("time: missing unit in duration %q", str)
	}
	return &d, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
