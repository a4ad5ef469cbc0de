// Package comfytest is a fake ComfyUI server, faithful to the parts of
// ComfyUI's API that the turnstile and its clients use: synchronous prompt
// validation with ComfyUI's 400 shape, a queue worker that runs one job at a
// time and writes history at its end, status broadcasts to every websocket
// and execution events to the prompt's own client, /free that only sets
// flags for the worker, /interrupt, /queue and /system_stats, at both /X and
// /api/X. It occupies the shared simulated GPU from a job's start until a
// free takes effect.
package comfytest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/upstreams/gputest"
)

// Options shape the fake's timing.
type Options struct {
	// JobDuration is how long a job runs unless its extra_data has
	// "fake_duration_ms". Default 100ms.
	JobDuration time.Duration
	// FreeDelay is how long the worker takes to act on /free once idle.
	// Default 10ms.
	FreeDelay time.Duration
	// ModelBytes is what a job's models reserve. Default 8 GiB.
	ModelBytes int64
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
	sockets  map[*socket]bool
	reserved int64         // bytes PyTorch reserves (models loaded)
	release  func(string)  // GPU occupancy while models are loaded
	freeFlag bool          // /free was called, the worker has not acted yet
	wake     chan struct{} // wakes the worker
	epoch    int           // bumped by Restart, to abandon running work

	freeStuck atomic.Bool // /free is accepted but the worker never acts on it
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
	extra    map[string]any
	clientID string
	duration time.Duration
	fail     bool
	stop     chan struct{} // closed by /interrupt
}

type socket struct {
	id  string
	out chan []byte
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
	if opts.JobDuration == 0 {
		opts.JobDuration = 100 * time.Millisecond
	}
	if opts.FreeDelay == 0 {
		opts.FreeDelay = 10 * time.Millisecond
	}
	if opts.ModelBytes == 0 {
		opts.ModelBytes = 8 << 30
	}
	s := &Server{gpu: gpu, opts: opts, history: map[string]map[string]any{}, sockets: map[*socket]bool{},
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
	if j := s.running; j != nil && s.interrupt.CompareAndSwap(j, nil) {
		close(j.stop)
	}
	s.running = nil
	s.history = map[string]map[string]any{}
	s.freeFlag = false
	s.reserved = 0
	if s.release != nil {
		s.release("process exit")
		s.release = nil
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
	j := &job{id: newID(), prompt: json.RawMessage(`{}`), duration: duration, stop: make(chan struct{})}
	s.enqueue(j)
	return j.id
}

func (s *Server) postPrompt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Prompt   json.RawMessage `json:"prompt"`
		ClientID string          `json:"client_id"`
		Extra    map[string]any  `json:"extra_data"`
		PromptID string          `json:"prompt_id"`
		Front    bool            `json:"front"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "500 Internal Server Error\n\nServer got itself in trouble", http.StatusInternalServerError)
		return
	}
	fail := func(typ, msg string, nodeErrors map[string]any) {
		writeJSON(w, 400, map[string]any{
			"error":       map[string]any{"type": typ, "message": msg, "details": "", "extra_info": map[string]any{}},
			"node_errors": nodeErrors,
		})
	}
	if len(body.Prompt) == 0 || string(body.Prompt) == "null" {
		fail("no_prompt", "No prompt provided", map[string]any{})
		return
	}
	var nodes map[string]struct {
		ClassType string         `json:"class_type"`
		Inputs    map[string]any `json:"inputs"`
	}
	if err := json.Unmarshal(body.Prompt, &nodes); err != nil {
		fail("invalid_prompt", "Invalid prompt: "+err.Error(), map[string]any{})
		return
	}
	outputs, failing := false, false
	for id, n := range nodes {
		switch {
		case n.ClassType == "" || n.ClassType == "Invalid":
			fail("prompt_outputs_failed_validation", "Prompt outputs failed validation", map[string]any{
				id: map[string]any{"errors": []map[string]string{{"type": "invalid_node", "message": "Cannot execute because node " + n.ClassType + " does not exist."}}, "class_type": n.ClassType},
			})
			return
		case strings.HasPrefix(n.ClassType, "Save") || strings.HasPrefix(n.ClassType, "Preview"):
			outputs = true
		case n.ClassType == "Fail":
			failing = true
		}
	}
	if !outputs {
		fail("prompt_no_outputs", "Prompt has no outputs", map[string]any{})
		return
	}
	id := body.PromptID
	if id == "" {
		id = newID()
	}
	d := s.opts.JobDuration
	if ms, ok := body.Extra["fake_duration_ms"].(float64); ok {
		d = time.Duration(ms * float64(time.Millisecond))
	}
	j := &job{id: id, prompt: body.Prompt, extra: body.Extra, clientID: body.ClientID, duration: d, fail: failing, stop: make(chan struct{})}
	n := s.enqueue(j)
	s.prompts.Add(1)
	writeJSON(w, 200, map[string]any{"prompt_id": id, "number": n, "node_errors": map[string]any{}})
}

func (s *Server) enqueue(j *job) int {
	s.mu.Lock()
	s.number++
	j.number = s.number
	s.pending = append(s.pending, j)
	s.mu.Unlock()
	s.gpu.Mark("comfy", "queued "+j.id)
	s.broadcastStatus()
	s.poke()
	return j.number
}

func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// worker runs jobs one at a time, then acts on free flags when idle, as
// ComfyUI's prompt_worker does.
func (s *Server) worker() {
	defer s.stopped.Done()
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		s.mu.Lock()
		var j *job
		if len(s.pending) > 0 {
			j = s.pending[0]
			s.pending = s.pending[1:]
			s.running = j
		}
		epoch := s.epoch
		freeNow := j == nil && s.freeFlag
		s.mu.Unlock()
		switch {
		case j != nil:
			s.run(j, epoch)
			continue
		case freeNow:
			s.doFree(epoch)
			continue
		}
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
	}
}

func (s *Server) run(j *job, epoch int) {
	s.mu.Lock()
	if s.release == nil {
		s.release = s.gpu.Occupy("comfy", "load models for "+j.id)
		s.reserved = s.opts.ModelBytes
	}
	s.mu.Unlock()
	s.gpu.Mark("comfy", "job "+j.id+" start")
	start := time.Now().UnixMilli()
	s.sendTo(j.clientID, map[string]any{"type": "execution_start", "data": map[string]any{"prompt_id": j.id, "timestamp": start}})
	s.sendTo(j.clientID, map[string]any{"type": "executing", "data": map[string]any{"node": "3", "prompt_id": j.id}})
	s.interrupt.Store(j)
	outcome := "execution_success"
	t := time.NewTimer(j.duration)
	select {
	case <-t.C:
		if j.fail {
			outcome = "execution_error"
		}
	case <-j.stop:
		t.Stop()
		outcome = "execution_interrupted"
	case <-s.stop:
		t.Stop()
		return
	}
	s.interrupt.CompareAndSwap(j, nil)
	s.mu.Lock()
	if s.epoch != epoch {
		s.mu.Unlock() // the process "died" during the job
		return
	}
	statusStr := "success"
	if outcome != "execution_success" {
		statusStr = "error"
	}
	end := time.Now().UnixMilli()
	s.history[j.id] = map[string]any{
		"prompt":  []any{j.number, j.id, j.prompt, j.extra, []string{"9"}},
		"outputs": map[string]any{"9": map[string]any{"images": []map[string]string{{"filename": "ComfyUI_00001_.png", "subfolder": "", "type": "output"}}}},
		"status": map[string]any{"status_str": statusStr, "completed": outcome == "execution_success", "messages": []any{
			[]any{"execution_start", map[string]any{"prompt_id": j.id, "timestamp": start}},
			[]any{outcome, map[string]any{"prompt_id": j.id, "timestamp": end}},
		}},
		"meta": map[string]any{},
	}
	s.running = nil
	s.mu.Unlock()
	s.gpu.Mark("comfy", "job "+j.id+" end "+outcome)
	s.broadcastStatus()
	s.sendTo(j.clientID, map[string]any{"type": "executing", "data": map[string]any{"node": nil, "prompt_id": j.id}})
	s.sendTo(j.clientID, map[string]any{"type": outcome, "data": map[string]any{"prompt_id": j.id, "timestamp": end}})
}

func (s *Server) doFree(epoch int) {
	select {
	case <-time.After(s.opts.FreeDelay):
	case <-s.stop:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch || len(s.pending) > 0 {
		return // a job came first; the worker frees after it
	}
	if s.freeStuck.Load() {
		s.freeFlag = false
		return
	}
	s.freeFlag = false
	s.reserved = 0
	if s.release != nil {
		s.release("free")
		s.release = nil
	}
}

func (s *Server) postFree(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Unload *bool `json:"unload_models"`
		Free   *bool `json:"free_memory"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	s.frees.Add(1)
	if (body.Unload != nil && *body.Unload) || (body.Free != nil && *body.Free) {
		s.mu.Lock()
		s.freeFlag = true
		s.mu.Unlock()
		s.gpu.Mark("comfy", "free requested")
		s.poke()
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) postInterrupt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		PromptID string `json:"prompt_id"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	if j := s.interrupt.Load(); j != nil && (body.PromptID == "" || body.PromptID == j.id) {
		if s.interrupt.CompareAndSwap(j, nil) {
			close(j.stop)
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) getPrompt(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	n := len(s.pending)
	if s.running != nil {
		n++
	}
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"exec_info": map[string]any{"queue_remaining": n}})
}

func (s *Server) getHistory(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id := r.PathValue("id"); id != "" {
		out := map[string]any{}
		if h, ok := s.history[id]; ok {
			out[id] = h
		}
		writeJSON(w, 200, out)
		return
	}
	writeJSON(w, 200, s.history)
}

func (s *Server) getQueue(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	item := func(j *job) []any { return []any{j.number, j.id, j.prompt, j.extra, []string{"9"}} }
	running, pending := []any{}, []any{}
	if s.running != nil {
		running = append(running, item(s.running))
	}
	for _, j := range s.pending {
		pending = append(pending, item(j))
	}
	writeJSON(w, 200, map[string]any{"queue_running": running, "queue_pending": pending})
}

func (s *Server) postQueue(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Clear  bool     `json:"clear"`
		Delete []string `json:"delete"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	s.mu.Lock()
	kept := s.pending[:0]
	for _, j := range s.pending {
		del := body.Clear
		for _, id := range body.Delete {
			del = del || id == j.id
		}
		if !del {
			kept = append(kept, j)
		}
	}
	s.pending = kept
	s.mu.Unlock()
	s.broadcastStatus()
	w.WriteHeader(http.StatusOK)
}

func (s *Server) systemStats(w http.ResponseWriter, r *http.Request) {
	const total = 24 << 30
	s.mu.Lock()
	reserved := s.reserved
	s.mu.Unlock()
	ollama := int64(s.gpu.Users("ollama")) * (5 << 30)
	writeJSON(w, 200, map[string]any{
		"system": map[string]any{"os": "posix", "comfyui_version": "0.3.64", "python_version": "3.12", "embedded_python": false},
		"devices": []map[string]any{{
			"name": "cuda:0 Simulated GPU", "type": "cuda", "index": 0,
			"vram_total": total, "vram_free": total - reserved - ollama,
			"torch_vram_total": reserved, "torch_vram_free": 0,
		}},
	})
}

func (s *Server) queueRemaining() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.pending)
	if s.running != nil {
		n++
	}
	return n
}

func (s *Server) broadcastStatus() {
	msg, _ := json.Marshal(map[string]any{"type": "status", "data": map[string]any{
		"status": map[string]any{"exec_info": map[string]any{"queue_remaining": s.queueRemaining()}}}})
	s.mu.Lock()
	defer s.mu.Unlock()
	for sock := range s.sockets {
		select {
		case sock.out <- msg:
		default: // a slow socket misses a message, as with a full buffer
		}
	}
}

func (s *Server) sendTo(clientID string, v any) {
	if clientID == "" {
		return
	}
	msg, _ := json.Marshal(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	for sock := range s.sockets {
		if sock.id == clientID {
			select {
			case sock.out <- msg:
			default:
			}
		}
	}
}

func (s *Server) ws(w http.ResponseWriter, r *http.Request) {
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	id := r.URL.Query().Get("clientId")
	if id == "" {
		id = newID()
	}
	sock := &socket{id: id, out: make(chan []byte, 64)}
	s.mu.Lock()
	// A new socket with the same id replaces the old one, as in ComfyUI.
	for old := range s.sockets {
		if old.id == id {
			close(old.out)
			delete(s.sockets, old)
		}
	}
	s.sockets[sock] = true
	s.mu.Unlock()
	first, _ := json.Marshal(map[string]any{"type": "status", "data": map[string]any{
		"status": map[string]any{"exec_info": map[string]any{"queue_remaining": s.queueRemaining()}}, "sid": id}})
	ctx := conn.CloseRead(r.Context())
	if conn.Write(ctx, websocket.MessageText, first) != nil {
		s.removeSocket(sock)
		return
	}
	for {
		select {
		case msg, ok := <-sock.out:
			if !ok {
				conn.Close(websocket.StatusGoingAway, "server closing")
				return
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Write(wctx, websocket.MessageText, msg)
			cancel()
			if err != nil {
				s.removeSocket(sock)
				return
			}
		case <-ctx.Done():
			s.removeSocket(sock)
			return
		}
	}
}

func (s *Server) removeSocket(sock *socket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sockets[sock] {
		close(sock.out)
		delete(s.sockets, sock)
	}
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
