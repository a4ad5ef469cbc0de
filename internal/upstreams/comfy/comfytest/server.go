// Package comfytest is a fake ComfyUI server, faithful to the parts of
// ComfyUI's API that the turnstile and its clients use: synchronous prompt
// validation with ComfyUI's 400 shape, a queue worker that runs one job at a
// time and writes history at its end, status broadcasts to every websocket
// and execution events to the prompt's own client, /free that only sets
// flags for the worker, /interrupt, /queue and /system_stats, at both /X and
// /api/X. It occupies the shared simulated GPU from a job's start until a
// free takes effect, charging Options.ModelBytes for its models and
// Options.JobBytes at a job's peak.
package comfytest

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// Options shape the fake's timing.
type Options struct {
	// JobDuration is how long a job runs unless its extra_data has
	// "fake_duration_ms". Default 100ms.
	JobDuration time.Duration
	// FreeDelay is how long the worker takes to act on /free once idle.
	// Default 10ms.
	FreeDelay time.Duration
	// ModelBytes is what a job's models keep on the GPU after it, until a
	// free unloads them: charged to the simulated GPU from their load,
	// and reported as PyTorch's reserved memory (/system_stats,
	// Reserved). Default 0: nothing charged, and 8 GiB reported.
	ModelBytes int64
	// JobBytes is what a job uses at its peak, its models included: from
	// the job's start to its end ComfyUI's charge on the simulated GPU is
	// the larger of JobBytes and ModelBytes, then ModelBytes until a
	// free. Default 0: nothing more than ModelBytes.
	JobBytes int64
	// InterruptDelay is how long a job goes on computing after /interrupt
	// before it stops at its next node or sampler step. Default 200ms
	// (seconds, on real servers).
	InterruptDelay time.Duration
	// HistoryLag is the time from execution_success (or _error,
	// _interrupted) to the history entry, which is written together with
	// the job leaving the queue. Default 100ms, as measured.
	HistoryLag time.Duration
	// TakeDelay is the instant between the worker taking a job from the
	// queue (it shows in queue_running) and the job's start, when
	// ComfyUI clears the interrupt flag: an interrupt that arrives then
	// is accepted and dropped. Default 2ms.
	TakeDelay time.Duration
	// Device is "cuda" (default) or "cpu": a CPU device reports system
	// memory with a null index, which is no GPU reading.
	Device string
}

// Server is a running fake ComfyUI.
type Server struct {
	*httptest.Server
	gpu  *gputest.GPU
	opts Options

	mu       sync.Mutex
	number   int
	pending  []*job
	running  *job
	history  map[string]map[string]any
	cache    map[string]bool // graphs whose outputs ComfyUI has cached
	sockets  map[*socket]bool
	reserved int64         // bytes PyTorch reserves (models loaded)
	release  func(string)  // GPU occupancy while models are loaded
	working  func(string)  // the running job's memory beyond its models (JobBytes)
	freeFlag bool          // /free was called, the worker has not acted yet
	wake     chan struct{} // wakes the worker
	epoch    int           // bumped by Restart, to abandon running work

	freeStuck atomic.Bool // /free is accepted but the worker never acts on it
	noSockets atomic.Bool // /ws refuses upgrades (RefuseSockets)
	prompts   atomic.Int64
	frees     atomic.Int64
	interrupt atomic.Pointer[job]
	stop      chan struct{}
	stopped   sync.WaitGroup
}

type job struct {
	number   int
	id       string
	prompt   json.RawMessage
	nodes    []string // node ids, in execution order
	outputs  []string // output node ids
	extra    map[string]any
	clientID string
	duration time.Duration
	fail     bool
	stop     chan struct{} // closed by /interrupt
	killed   chan struct{} // closed when the process dies mid-job
	started  bool          // past the take: interruptible; under Server.mu
}

type socket struct {
	id     string
	out    chan []byte
	silent bool // another socket took its client id: it is sent nothing
}

// NewServer starts a fake ComfyUI on a loopback port.
func NewServer(gpu *gputest.GPU, opts Options) *Server {
	s := NewUnstarted(gpu, opts)
	s.Start()
	return s
}

// NewUnstarted returns a fake whose listener is not started yet, so the
// caller may set s.Listener first (the demo uses fixed ports).
func NewUnstarted(gpu *gputest.GPU, opts Options) *Server {
	fakeserver.Default(&opts.JobDuration, 100*time.Millisecond)
	fakeserver.Default(&opts.FreeDelay, 10*time.Millisecond)
	fakeserver.Default(&opts.InterruptDelay, 200*time.Millisecond)
	fakeserver.Default(&opts.HistoryLag, 100*time.Millisecond)
	fakeserver.Default(&opts.TakeDelay, 2*time.Millisecond)
	fakeserver.Default(&opts.Device, "cuda")
	s := &Server{gpu: gpu, opts: opts, history: map[string]map[string]any{}, cache: map[string]bool{}, sockets: map[*socket]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(s.routes())
	s.stopped.Add(1)
	go s.worker()
	return s
}

// Close stops the worker and the server.
func (s *Server) Close() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.DropSockets()
	s.Server.CloseClientConnections()
	s.Server.Close()
	s.stopped.Wait()
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, prefix := range []string{"", "/api"} {
		mux.HandleFunc("POST "+prefix+"/prompt", s.postPrompt)
		mux.HandleFunc("GET "+prefix+"/prompt", s.getPrompt)
		mux.HandleFunc("GET "+prefix+"/history", s.getHistory)
		mux.HandleFunc("GET "+prefix+"/history/{id}", s.getHistory)
		mux.HandleFunc("GET "+prefix+"/queue", s.getQueue)
		mux.HandleFunc("POST "+prefix+"/queue", s.postQueue)
		mux.HandleFunc("POST "+prefix+"/interrupt", s.postInterrupt)
		mux.HandleFunc("POST "+prefix+"/free", s.postFree)
		mux.HandleFunc("GET "+prefix+"/system_stats", s.systemStats)
		mux.HandleFunc("GET "+prefix+"/object_info", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, 200, map[string]any{"KSampler": map[string]any{}, "SaveImage": map[string]any{}})
		})
	}
	mux.HandleFunc("GET /ws", s.ws)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<!doctype html><title>ComfyUI</title>")
	})
	return mux
}

// Prompts counts accepted prompts.
func (s *Server) Prompts() int64 { return s.prompts.Load() }

// Frees counts /free calls.
func (s *Server) Frees() int64 { return s.frees.Load() }

// Reserved is the memory PyTorch reserves now (models loaded).
func (s *Server) Reserved() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reserved
}

// Sockets is the number of open websockets.
func (s *Server) Sockets() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sockets)
}

// RefuseSockets makes /ws answer 503 instead of upgrading, as a proxy in
// front of ComfyUI that does not pass websockets would: a watch then
// stays down however often it retries.
func (s *Server) RefuseSockets(refuse bool) { s.noSockets.Store(refuse) }

// SetFreeStuck makes /free be accepted but never carried out, as when a
// custom node pins its models.
func (s *Server) SetFreeStuck(stuck bool) { s.freeStuck.Store(stuck) }

// Restart simulates a ComfyUI restart: the process dies (its memory is
// freed, its queue and history are lost, its sockets close) and a fresh
// one answers on the same port.
func (s *Server) Restart() {
	s.mu.Lock()
	s.epoch++
	s.pending = nil
	if j := s.running; j != nil {
		close(j.killed)
	}
	s.running = nil
	s.history = map[string]map[string]any{}
	s.freeFlag = false
	s.reserved = 0
	if s.release != nil {
		s.release("process exit")
		s.release = nil
	}
	if s.working != nil {
		s.working("process exit")
		s.working = nil
	}
	s.mu.Unlock()
	s.gpu.Mark("comfy", "restart")
	s.DropSockets()
}

// DropSockets closes every websocket, as a network blip would.
func (s *Server) DropSockets() {
	s.mu.Lock()
	for sock := range s.sockets {
		close(sock.out)
		delete(s.sockets, sock)
	}
	s.mu.Unlock()
}

// Submit queues a prompt directly, as ComfyUI's own UI on its own port
// would, bypassing any proxy. It returns the prompt id.
func (s *Server) Submit(duration time.Duration) string {
	// Each job's own graph, as a user's prompts differ (a seed, a file
	// name): ComfyUI's cache would answer a second identical one at once
	// if the first's history was written before it started.
	id := newID()
	graph := fmt.Sprintf(`{"9":{"class_type":"SaveImage","inputs":{"filename_prefix":%q}}}`, id)
	j := &job{id: id, prompt: json.RawMessage(graph), nodes: []string{"9"},
		outputs: []string{"9"}, duration: duration, stop: make(chan struct{}), killed: make(chan struct{})}
	s.enqueue(j)
	return j.id
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	fakeserver.WriteJSON(w, status, fakeserver.JSONUTF8, v)
}
