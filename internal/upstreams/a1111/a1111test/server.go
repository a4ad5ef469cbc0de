// Package a1111test is a fake AUTOMATIC1111 stable-diffusion-webui (v1.8)
// or, with Options.Forge, a fake Forge, faithful to the parts of their
// /sdapi/v1 API that the turnstile depends on (engines-api.md §4).
//
// It keeps their facts, awkward ones included. Every GPU route runs inside
// one FIFO queue lock that the Gradio UI shares (StartUIJob), one job at a
// time, and answers only at the job's end; a request waiting for the lock
// does not show in /progress, and one whose client has gone still runs
// when its turn comes. /progress, /interrupt, /memory, /unload-checkpoint
// and /reload-checkpoint are not under the lock, so an unload sent during a
// job acts during it. An interrupt takes effect at the job's next step, and
// the job then answers 200 with what it has. A1111's unload moves the
// checkpoint to the CPU and nothing brings it back but reload-checkpoint (a
// generation fails meanwhile); Forge's unload frees everything, its reload
// does nothing, and its next generation loads the model by itself. A
// changed sd_model_checkpoint option waits for the queue lock (its onchange
// runs through wrap_queued_call), and A1111 then loads that checkpoint with
// no job in /progress; every generation reloads the option's checkpoint if
// another is loaded.
//
// The checkpoint occupies the shared simulated GPU (service "a1111", what
// "checkpoint on GPU") from the start of its load until it is off the GPU;
// a generation computes within that occupancy. Upscalers and interrogators
// occupy it for their own jobs.
package a1111test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// service is the fake's name on the simulated GPU.
const service = "a1111"

// Options shape the fake.
type Options struct {
	// Forge makes the fake behave as Forge: unload-checkpoint frees every
	// model, reload-checkpoint is a no-op, and a generation loads the
	// models back by itself.
	Forge bool
	// JobDuration is how long one job (txt2img, img2img, extras,
	// interrogate) computes, in Steps sampling steps for a generation.
	// Default 60ms.
	JobDuration time.Duration
	// Steps is how many sampling steps a generation takes. Default 6.
	Steps int
	// LoadDelay is how long the checkpoint takes to reach the GPU.
	// Default 20ms.
	LoadDelay time.Duration
	// UnloadDelay is how long it takes to leave it. Default 10ms.
	UnloadDelay time.Duration
	// NoCUDA makes /memory answer cuda {"error":"unavailable"}, as on a
	// CPU, MPS or DirectML device. The fake still occupies the simulated
	// GPU: MPS and DirectML are GPUs that CUDA figures do not cover.
	NoCUDA bool
	// NotLoadedAtStart starts the fake with no checkpoint loaded; the
	// first generation loads it. By default the checkpoint is on the GPU
	// from start-up, as A1111 loads it at launch.
	NotLoadedAtStart bool
	// CheckpointBytes is what the checkpoint reserves on the GPU while it
	// is there. Default 4 GiB.
	CheckpointBytes int64
	// ModelBytes is what the checkpoint charges to the simulated GPU
	// while it is on it (an upscaler's or interrogator's model, on it
	// for its job only, charges nothing). /memory still reports
	// CheckpointBytes as reserved. Default 0.
	ModelBytes int64
	// ImageBytes is the length of each generated image as the API sends
	// it (base64). A real 512x512 PNG is some 400 KB of it, enough that
	// copying the answer to a client that has gone fails part way.
	// Default: a 1x1 PNG.
	ImageBytes int
}

// Server is a running fake A1111 or Forge.
type Server struct {
	imageOnce sync.Once
	imageB64  string // what image() answers
	http      *fakeserver.Server
	gpu       *gputest.GPU
	opts      Options

	queue fifoLock        // modules.call_queue.queue_lock
	move  sync.Mutex      // one checkpoint move (load, unload, reload) at a time
	stop  <-chan struct{} // closed by Close: every wait gives up
	once  sync.Once
	ui    sync.WaitGroup // StartUIJob's goroutines

	mu      sync.Mutex
	state   state      // shared.state, as /progress shows it
	ckpt    checkpoint // the model and where it is
	option  string     // the sd_model_checkpoint option (a title)
	options map[string]any
	running *job  // the job holding the queue lock, if any
	peak    int64 // reserved memory's peak
	seq     int

	jobs    atomic.Int64
	unloads atomic.Int64
	reloads atomic.Int64
	hold    fakeserver.Gate
	down    atomic.Bool // killed, not relaunched (restart.go)
}

// NewServer starts a fake on a loopback port.
func NewServer(gpu *gputest.GPU, opts Options) *Server {
	fakeserver.Default(&opts.JobDuration, 60*time.Millisecond)
	fakeserver.Default(&opts.Steps, 6)
	fakeserver.Default(&opts.LoadDelay, 20*time.Millisecond)
	fakeserver.Default(&opts.UnloadDelay, 10*time.Millisecond)
	fakeserver.Default(&opts.ImageBytes, len(pngB64))
	fakeserver.Default(&opts.CheckpointBytes, 4<<30)
	s := &Server{gpu: gpu, opts: opts, option: checkpoints[0].title,
		options: map[string]any{}, state: state{jobTimestamp: "0"}}
	if !opts.NotLoadedAtStart {
		s.ckpt = checkpoint{title: s.option, where: onGPU,
			release: gpu.OccupyBytes(service, "checkpoint on GPU: "+s.option+" (loaded at start-up)", opts.ModelBytes)}
		s.notePeakLocked()
	}
	s.http = fakeserver.Start(s.downable(s.routes()))
	s.stop = s.http.Done()
	return s
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	post := func(path string, h http.HandlerFunc) {
		mux.HandleFunc("POST "+path, h)
		mux.HandleFunc(path, methodNotAllowed)
	}
	post("/sdapi/v1/txt2img", s.txt2img)
	post("/sdapi/v1/img2img", s.img2img)
	post("/sdapi/v1/extra-single-image", s.extraSingle)
	post("/sdapi/v1/extra-batch-images", s.extraBatch)
	post("/sdapi/v1/interrogate", s.interrogate)
	for _, p := range []string{"refresh-checkpoints", "refresh-vae", "refresh-embeddings"} {
		post("/sdapi/v1/"+p, s.refresh)
	}
	post("/sdapi/v1/interrupt", s.interrupt)
	post("/sdapi/v1/skip", s.skip)
	post("/sdapi/v1/unload-checkpoint", s.unloadCheckpoint)
	post("/sdapi/v1/reload-checkpoint", s.reloadCheckpoint)
	mux.HandleFunc("GET /sdapi/v1/progress", s.progress)
	mux.HandleFunc("GET /sdapi/v1/memory", s.memory)
	mux.HandleFunc("GET /sdapi/v1/sd-models", s.sdModels)
	mux.HandleFunc("GET /sdapi/v1/options", s.getOptions)
	mux.HandleFunc("POST /sdapi/v1/options", s.setOptions)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	})
	return mux
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.http.URL() }

// Close stops the server: jobs and waits end, and the process's memory is
// given back.
func (s *Server) Close() {
	s.once.Do(func() {
		s.http.Close()
		s.ui.Wait()
		s.mu.Lock()
		release := s.ckpt.release
		s.ckpt.release = nil
		s.mu.Unlock()
		if release != nil {
			release("process exit")
		}
	})
}

// Jobs counts the jobs that took the queue lock and ran (API and UI,
// failed ones included).
func (s *Server) Jobs() int64 { return s.jobs.Load() }

// Unloads counts unload-checkpoint calls.
func (s *Server) Unloads() int64 { return s.unloads.Load() }

// Reloads counts reload-checkpoint calls.
func (s *Server) Reloads() int64 { return s.reloads.Load() }

// Waiting is the number of jobs and calls waiting for the queue lock.
func (s *Server) Waiting() int { return s.queue.waiting() }

// OnGPU reports whether the checkpoint occupies the GPU now (loading,
// loaded, or still leaving).
func (s *Server) OnGPU() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ckpt.release != nil
}

// HoldJobs makes every job, once it holds the queue lock (a generation:
// after its first step), wait until the returned function is called. An
// interrupt, or the checkpoint leaving the GPU, ends a generation's wait
// as it would end a long step.
func (s *Server) HoldJobs() (resume func()) { return s.hold.Hold() }

// pause waits d, or until the server closes (false).
func (s *Server) pause(d time.Duration) bool { return fakeserver.Sleep(s.stop, d) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	fakeserver.WriteJSON(w, status, fakeserver.JSON, v)
}

// apiError is A1111's answer to an exception in a route (api_middleware's
// handle_exception): the exception's type name, its detail and body if it
// has them, and str(e).
func apiError(w http.ResponseWriter, status int, typ, detail, errors string) {
	writeJSON(w, status, map[string]string{"error": typ, "detail": detail, "body": "", "errors": errors})
}

// httpError is an HTTPException raised by a route, through the same
// handler: str() of Starlette's HTTPException is "status: detail".
func httpError(w http.ResponseWriter, status int, detail string) {
	apiError(w, status, "HTTPException", detail, fmt.Sprintf("%d: %s", status, detail))
}

// methodNotAllowed is FastAPI's answer to a known path with another method.
func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"detail": "Method Not Allowed"})
}

// decodeBody reads a JSON object body as FastAPI does for a pydantic
// model: a missing or malformed body is a 422 (shape simplified from
// FastAPI's RequestValidationError).
func decodeBody(w http.ResponseWriter, r *http.Request, out *map[string]any) bool {
	b, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if strings.TrimSpace(string(b)) == "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []map[string]any{
			{"loc": []string{"body"}, "msg": "field required", "type": "value_error.missing"}}})
		return false
	}
	if err := json.Unmarshal(b, out); err != nil || *out == nil {
		msg := "value is not a valid dict"
		if err != nil {
			msg = err.Error()
		}
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"detail": []map[string]any{
			{"loc": []string{"body"}, "msg": msg, "type": "value_error.jsondecode"}}})
		return false
	}
	return true
}
