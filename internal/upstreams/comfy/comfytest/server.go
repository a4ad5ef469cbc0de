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
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

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
	// ModelBytes is what a job's models reserve. Default 8 GiB.
	ModelBytes int64
	// InterruptDelay is how long a job goes on computing after /interrupt
	// before it stops at its next node or sampler step. Default 200ms
	// (seconds, on real servers).
	InterruptDelay time.Duration
	// HistoryLag is the time from execution_success (or _error,
	// _interrupted) to the history entry, which is written together with
	// the job leaving the queue. Default 100ms, as measured.
	HistoryLag time.Duration
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
	nodes    []string // node ids, in execution order
	outputs  []string // output node ids
	extra    map[string]any
	clientID string
	duration time.Duration
	fail     bool
	stop     chan struct{} // closed by /interrupt
	killed   chan struct{} // closed when the process dies mid-job
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
	if opts.JobDuration == 0 {
		opts.JobDuration = 100 * time.Millisecond
	}
	if opts.FreeDelay == 0 {
		opts.FreeDelay = 10 * time.Millisecond
	}
	if opts.ModelBytes == 0 {
		opts.ModelBytes = 8 << 30
	}
	if opts.InterruptDelay == 0 {
		opts.InterruptDelay = 200 * time.Millisecond
	}
	if opts.HistoryLag == 0 {
		opts.HistoryLag = 100 * time.Millisecond
	}
	if opts.Device == "" {
		opts.Device = "cuda"
	}
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
	j := &job{id: newID(), prompt: json.RawMessage(`{"9":{"class_type":"SaveImage","inputs":{}}}`), nodes: []string{"9"},
		outputs: []string{"9"}, duration: duration, stop: make(chan struct{}), killed: make(chan struct{})}
	s.enqueue(j)
	return j.id
}

// knownNodes are the node classes the fake can run; "Fail" raises an
// error while running. Any other class is unknown to it, as a custom node
// that is not installed is to ComfyUI.
var knownNodes = map[string]bool{
	"KSampler": true, "CheckpointLoaderSimple": true, "CLIPTextEncode": true, "EmptyLatentImage": true,
	"VAEDecode": true, "EmptyImage": true, "ImageBlur": true, "LoadImage": true, "Fail": true,
	"SaveImage": true, "PreviewImage": true,
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
		serverTrouble(w)
		return
	}
	fail := func(typ, msg, details string, nodeErrors map[string]any) {
		writeJSON(w, 400, map[string]any{
			"error":       map[string]any{"type": typ, "message": msg, "details": details, "extra_info": map[string]any{}},
			"node_errors": nodeErrors,
		})
	}
	if len(body.Prompt) == 0 || string(body.Prompt) == "null" {
		fail("no_prompt", "No prompt provided", "No prompt provided", map[string]any{})
		return
	}
	var nodes map[string]struct {
		ClassType string         `json:"class_type"`
		Inputs    map[string]any `json:"inputs"`
	}
	if err := json.Unmarshal(body.Prompt, &nodes); err != nil {
		serverTrouble(w) // a prompt given as a string, or not an object of nodes
		return
	}
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var outputs []string
	failing := false
	for _, id := range ids {
		n := nodes[id]
		if !knownNodes[n.ClassType] {
			fail("invalid_prompt", "Cannot execute because node "+n.ClassType+" does not exist.", "Node ID '#"+id+"'", map[string]any{})
			return
		}
		switch n.ClassType {
		case "SaveImage", "PreviewImage":
			outputs = append(outputs, id)
		case "Fail":
			failing = true
		}
	}
	if len(outputs) == 0 {
		fail("prompt_no_outputs", "Prompt has no outputs", "", map[string]any{})
		return
	}
	for _, id := range ids {
		n := nodes[id]
		if radius, ok := n.Inputs["blur_radius"].(float64); ok && n.ClassType == "ImageBlur" && radius > 31 {
			fail("prompt_outputs_failed_validation", "Prompt outputs failed validation", "", map[string]any{
				id: map[string]any{"errors": []map[string]any{{"type": "value_bigger_than_max",
					"message": "Value bigger than max", "details": fmt.Sprintf("blur_radius, %v bigger than max of 31", radius),
					"extra_info": map[string]any{"input_name": "blur_radius"}}},
					"dependent_outputs": outputs, "class_type": n.ClassType},
			})
			return
		}
	}
	id := body.PromptID
	if id == "" {
		id = newID()
	}
	d := s.opts.JobDuration
	if ms, ok := body.Extra["fake_duration_ms"].(float64); ok {
		d = time.Duration(ms * float64(time.Millisecond))
	}
	j := &job{id: id, prompt: body.Prompt, nodes: ids, outputs: outputs, extra: body.Extra, clientID: body.ClientID,
		duration: d, fail: failing, stop: make(chan struct{}), killed: make(chan struct{})}
	n := s.enqueue(j)
	s.prompts.Add(1)
	writeJSON(w, 200, map[string]any{"prompt_id": id, "number": n, "node_errors": map[string]any{}})
}

// serverTrouble is aiohttp's answer to an exception in a handler.
func serverTrouble(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	fmt.Fprint(w, "500 Internal Server Error\n\nServer got itself in trouble")
}

func (s *Server) enqueue(j *job) int {
	s.mu.Lock()
	j.number = s.number // counts from 0 per process
	s.number++
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

// worker runs jobs one at a time, as ComfyUI's prompt_worker does. A free
// flag set during a job is acted on right after that job, before the next
// pending one; set while idle, at once.
func (s *Server) worker() {
	defer s.stopped.Done()
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		s.mu.Lock()
		epoch := s.epoch
		freeNow := s.freeFlag
		var j *job
		if !freeNow && len(s.pending) > 0 {
			j = s.pending[0]
			s.pending = s.pending[1:]
			s.running = j
		}
		s.mu.Unlock()
		switch {
		case freeNow:
			s.doFree(epoch)
			continue
		case j != nil:
			s.broadcastStatus() // ComfyUI announces a job twice: queued, and taken
			s.run(j, epoch)
			continue
		}
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
	}
}

// run executes a job: its models are loaded (the GPU is ComfyUI's from
// here until a free), its nodes run, and its messages go out in ComfyUI's
// order. Its history entry and its leaving the queue come HistoryLag after
// the final message, together.
func (s *Server) run(j *job, epoch int) {
	s.mu.Lock()
	if s.release == nil {
		s.release = s.gpu.Occupy("comfy", "load models for "+j.id)
		s.reserved = s.opts.ModelBytes
	}
	key := string(j.prompt)
	cached := s.cache[key]
	s.mu.Unlock()
	// The job can be interrupted from its start on; an interrupt that
	// came before it was dropped, as ComfyUI clears the flag when a job
	// starts executing.
	s.interrupt.Store(j)
	s.gpu.Mark("comfy", "job "+j.id+" start")
	start := time.Now().UnixMilli()
	msgs := [][]any{{"execution_start", map[string]any{"prompt_id": j.id, "timestamp": start}}}
	s.sendTo(j.clientID, "execution_start", msgs[0][1])
	cachedNodes := []string{}
	duration := j.duration
	if cached {
		cachedNodes, duration = j.nodes, time.Millisecond
	}
	msgs = append(msgs, []any{"execution_cached", map[string]any{"nodes": cachedNodes, "prompt_id": j.id, "timestamp": start}})
	s.sendTo(j.clientID, "execution_cached", msgs[1][1])
	outcome := s.runNodes(j, cached, duration)
	if outcome == "" {
		return // the server is closing
	}
	s.interrupt.CompareAndSwap(j, nil)
	end := time.Now().UnixMilli()
	final := map[string]any{"prompt_id": j.id, "timestamp": end}
	switch outcome {
	case "execution_error":
		final = map[string]any{"prompt_id": j.id, "node_id": j.nodes[0], "node_type": "Fail", "exception_message": "simulated failure",
			"exception_type": "RuntimeError", "traceback": []string{}, "executed": []string{}, "timestamp": end}
	case "execution_interrupted":
		final = map[string]any{"prompt_id": j.id, "node_id": j.nodes[0], "node_type": "KSampler", "executed": []string{}, "timestamp": end}
	}
	msgs = append(msgs, []any{outcome, final})
	s.gpu.Mark("comfy", "job "+j.id+" end "+outcome)
	if outcome == "execution_interrupted" && j.clientID == "" {
		s.sendAll(outcome, final)
	} else {
		s.sendTo(j.clientID, outcome, final)
	}
	select {
	case <-time.After(s.opts.HistoryLag):
	case <-s.stop:
		return
	}
	s.mu.Lock()
	if s.epoch != epoch {
		s.mu.Unlock() // the process "died" during the job
		return
	}
	statusStr := "success"
	if outcome != "execution_success" {
		statusStr = "error"
	} else {
		s.cache[key] = true
	}
	images := map[string]any{}
	for _, o := range j.outputs {
		images[o] = map[string]any{"images": []map[string]string{{"filename": "ComfyUI_00001_.png", "subfolder": "", "type": "output"}}}
	}
	s.history[j.id] = map[string]any{
		"prompt":  []any{j.number, j.id, j.prompt, map[string]any{"client_id": j.clientID}, j.outputs},
		"outputs": images,
		"status":  map[string]any{"status_str": statusStr, "completed": outcome == "execution_success", "messages": msgs},
		"meta":    map[string]any{},
	}
	s.running = nil
	s.mu.Unlock()
	s.gpu.Mark("comfy", "history "+j.id)
	s.broadcastStatus()
	s.sendTo(j.clientID, "executing", map[string]any{"node": nil, "prompt_id": j.id})
}

// runNodes runs the job's nodes for duration in all, sending executing and
// progress_state for each and executed for each output. An interrupt
// takes effect only InterruptDelay later, at the next node or step. It
// returns the outcome message, or "" if the server is closing.
func (s *Server) runNodes(j *job, cached bool, duration time.Duration) string {
	done := time.NewTimer(duration)
	defer done.Stop()
	perNode := duration / time.Duration(max(len(j.nodes), 1))
	var stopAt <-chan time.Time
	stop := j.stop
	for i := 0; ; {
		if !cached && i < len(j.nodes) {
			node := j.nodes[i]
			s.sendTo(j.clientID, "executing", map[string]any{"node": node, "display_node": node, "prompt_id": j.id})
			progress := map[string]any{"prompt_id": j.id, "nodes": map[string]any{node: map[string]any{"state": "running", "node_id": node}}}
			if j.clientID == "" {
				s.sendAll("progress_state", progress)
			} else {
				s.sendTo(j.clientID, "progress_state", progress)
			}
		}
		next := time.NewTimer(perNode)
		select {
		case <-done.C:
			next.Stop()
			for _, o := range j.outputs {
				s.sendTo(j.clientID, "executed", map[string]any{"node": o, "display_node": o, "prompt_id": j.id,
					"output": map[string]any{"images": []map[string]string{{"filename": "ComfyUI_temp_00001_.png", "type": "temp"}}}})
			}
			if j.fail {
				return "execution_error"
			}
			return "execution_success"
		case <-next.C:
			i++
		case <-stop:
			next.Stop()
			stop = nil
			t := time.NewTimer(s.opts.InterruptDelay)
			defer t.Stop()
			stopAt = t.C
		case <-stopAt:
			next.Stop()
			return "execution_interrupted"
		case <-s.stop:
			next.Stop()
			return ""
		case <-j.killed:
			next.Stop()
			return ""
		}
	}
}

// doFree carries out /free: the models leave the GPU, which takes
// FreeDelay, and only at the very end is PyTorch's reserved memory given
// back. The cache of outputs goes too.
func (s *Server) doFree(epoch int) {
	s.mu.Lock()
	s.freeFlag = false
	s.mu.Unlock()
	select {
	case <-time.After(s.opts.FreeDelay):
	case <-s.stop:
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epoch != epoch || s.freeStuck.Load() {
		return
	}
	s.cache = map[string]bool{}
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
	emptyOK(w)
}

// postInterrupt sets the running job's interrupt flag (with no prompt_id,
// or the running job's); an interrupt naming a pending job does nothing.
// The job stops later, at its next node.
func (s *Server) postInterrupt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		PromptID string `json:"prompt_id"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	if j := s.interrupt.Load(); j != nil && (body.PromptID == "" || body.PromptID == j.id) {
		if s.interrupt.CompareAndSwap(j, nil) {
			s.gpu.Mark("comfy", "interrupt requested "+j.id)
			close(j.stop)
		}
	}
	emptyOK(w)
}

// emptyOK is ComfyUI's answer to /free and /interrupt: 200, no body.
func emptyOK(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/octet-stream")
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
	item := func(j *job) []any {
		return []any{j.number, j.id, j.prompt, map[string]any{"client_id": j.clientID}, j.outputs}
	}
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
	device := map[string]any{
		"name": "cpu", "type": "cpu", "index": nil,
		"vram_total": 64 << 30, "vram_free": 48 << 30, "torch_vram_total": 64 << 30, "torch_vram_free": 48 << 30,
	}
	if s.opts.Device != "cpu" {
		ollama := int64(s.gpu.Users("ollama")) * (5 << 30)
		// vram_free counts PyTorch's reserved-but-unused memory inside
		// ComfyUI as free (here, a quarter of what its models reserve).
		idle := reserved / 4
		device = map[string]any{
			"name": "cuda:0 Simulated GPU : cudaMallocAsync", "type": "cuda", "index": 0,
			"vram_total": total, "vram_free": total - reserved - ollama + idle,
			"torch_vram_total": reserved, "torch_vram_free": idle,
		}
	}
	writeJSON(w, 200, map[string]any{
		"system":  map[string]any{"os": "posix", "comfyui_version": "0.3.64", "python_version": "3.12", "embedded_python": false},
		"devices": []map[string]any{device},
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
	s.sendAll("status", map[string]any{"status": map[string]any{"exec_info": map[string]any{"queue_remaining": s.queueRemaining()}}})
}

// sendAll sends a message to every socket (but silenced ones).
func (s *Server) sendAll(typ string, data any) {
	msg, _ := json.Marshal(map[string]any{"type": typ, "data": data})
	s.mu.Lock()
	defer s.mu.Unlock()
	for sock := range s.sockets {
		if !sock.silent {
			select {
			case sock.out <- msg:
			default: // a slow socket misses a message, as with a full buffer
			}
		}
	}
}

// sendTo sends a message to the sockets of one client id; a job posted
// without one has nobody to tell.
func (s *Server) sendTo(clientID, typ string, data any) {
	if clientID == "" {
		return
	}
	msg, _ := json.Marshal(map[string]any{"type": typ, "data": data})
	s.mu.Lock()
	defer s.mu.Unlock()
	for sock := range s.sockets {
		if sock.id == clientID && !sock.silent {
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
	// A new socket with the same id takes its messages; the old one stays
	// open and is sent nothing more, as in ComfyUI.
	for old := range s.sockets {
		if old.id == id {
			old.silent = true
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
