package a1111test

import (
	"fmt"
	"sync"
	"time"
)

// job is one piece of work under the queue lock: an API GPU route or a UI
// job.
type job struct {
	n          int
	route      string // "txt2img", "img2img", "extras", "interrogate", "ui"
	stateJob   string // state.job while it runs; "" for a job that never calls state.begin
	generation bool   // it samples with the checkpoint
	duration   time.Duration
	checkpoint string // override_settings.sd_model_checkpoint, if any
	gradio     bool   // a UI job: wrap_gradio_call clears the flags after it

	stopNext  chan struct{} // closed by an interrupt or a skip
	stopOnce  sync.Once
	modelGone chan struct{} // closed when the checkpoint leaves the GPU mid-job
	goneOnce  sync.Once

	// Guarded by Server.mu:
	sampling bool         // it computes with the checkpoint on the GPU
	working  int64        // the job's own tensors on the GPU
	release  func(string) // the checkpoint's occupancy, left to the job's end by an unload
}

func (s *Server) newJob(route, stateJob string, generation bool, d time.Duration) *job {
	s.mu.Lock()
	s.seq++
	n := s.seq
	s.mu.Unlock()
	return &job{n: n, route: route, stateJob: stateJob, generation: generation, duration: d,
		stopNext: make(chan struct{}), modelGone: make(chan struct{})}
}

func (j *job) label() string { return fmt.Sprintf("job %d %s", j.n, j.route) }

func (j *job) stopAtNextStep() { j.stopOnce.Do(func() { close(j.stopNext) }) }

func (j *job) loseModel() { j.goneOnce.Do(func() { close(j.modelGone) }) }

// outcome is how a job ended.
type outcome int

const (
	finished    outcome = iota
	interrupted         // by /interrupt or /skip: it answers with what it has
	deviceError         // its model was not on the GPU
	aborted             // the server closed
)

func (o outcome) String() string {
	return [...]string{"finished", "interrupted", "failed: device error", "aborted"}[o]
}

// enqueue takes the job's place in the queue lock's line now.
func (s *Server) enqueue(j *job) (turn chan struct{}) {
	turn = s.queue.join()
	if turn != nil {
		s.gpu.Mark(service, j.label()+" waits for the queue lock")
	}
	return turn
}

// run waits for the job's turn and runs it, holding the lock throughout.
// Nothing but the server's closing abandons it: the HTTP request's
// context is not consulted, because A1111 runs its routes in a thread
// pool that a client going away does not stop.
func (s *Server) run(j *job, turn chan struct{}) outcome {
	if !s.queue.await(turn, s.stop) {
		return aborted
	}
	defer s.queue.unlock()
	s.jobs.Add(1)
	s.mu.Lock()
	s.running = j
	if j.stateJob != "" {
		s.state.begin(j.stateJob)
	}
	s.mu.Unlock()
	s.gpu.Mark(service, j.label()+" start")
	out := s.work(j)
	s.gpu.Mark(service, j.label()+" end: "+out.String())
	s.mu.Lock()
	s.running = nil
	switch {
	case j.gradio:
		s.state.endGradio()
	case j.stateJob != "":
		s.state.end()
	}
	release := j.release
	s.mu.Unlock()
	if release != nil {
		release("checkpoint off GPU: the job's tensors freed after an unload during it")
	}
	return out
}

func (s *Server) work(j *job) outcome {
	if !j.generation {
		return s.auxiliary(j)
	}
	// The move lock is held until the job counts as sampling, so that an
	// unload either comes before the model is ready (and the job sees it)
	// or finds the job sampling with it.
	s.move.Lock()
	out := s.prepareCheckpoint(j)
	if out == finished {
		s.mu.Lock()
		s.state.jobCount = 1 // n_iter, once processing has the model
		s.state.samplingSteps = s.opts.Steps
		j.sampling = true
		j.working = jobBytes
		s.notePeakLocked()
		s.mu.Unlock()
	}
	s.move.Unlock()
	if out != finished {
		return out
	}
	defer s.dropWorking(j)
	return s.sample(j)
}

// prepareCheckpoint makes sure the job's checkpoint is on the GPU, as
// process_images does before sampling (job_count stays -1 meanwhile). An
// override naming an unknown checkpoint is dropped. A1111 fails on a model
// left on the CPU by unload-checkpoint: reload_model_weights returns early
// for the same checkpoint. The failure's exact form is UNVERIFIED (the
// sheet allows a device error or a run on the CPU); the fake answers a
// device error. s.move is held.
func (s *Server) prepareCheckpoint(j *job) outcome {
	s.mu.Lock()
	target := s.option
	if t, ok := lookupCheckpoint(j.checkpoint); ok {
		target = t
	}
	c := s.ckpt
	s.mu.Unlock()
	why := "for " + j.label()
	if s.opts.Forge {
		if c.where == onGPU && c.title == target {
			return finished
		}
		if !s.loadCheckpoint(target, why) {
			return aborted
		}
		return finished
	}
	stuck, ok := s.reloadModelWeights(target, why)
	switch {
	case !ok:
		return aborted
	case stuck:
		s.gpu.Mark(service, j.label()+" fails: the checkpoint is on the CPU (unload-checkpoint with no reload-checkpoint)")
		return deviceError
	}
	return finished
}

// sample runs the job's steps. An interrupt, or the model leaving the
// GPU, is seen at the next step boundary, as the sampler's callback sees
// it.
func (s *Server) sample(j *job) outcome {
	perStep := j.duration / time.Duration(s.opts.Steps)
	for step := 1; step <= s.opts.Steps; step++ {
		if !s.pause(perStep) {
			return aborted
		}
		select {
		case <-j.modelGone:
			s.gpu.Mark(service, j.label()+" fails: its checkpoint left the GPU during the job")
			return deviceError
		default:
		}
		s.mu.Lock()
		s.state.samplingStep = step
		s.mu.Unlock()
		select {
		case <-j.stopNext:
			return interrupted
		default:
		}
		if step == 1 && !s.holdGeneration(j) {
			return aborted
		}
	}
	return finished
}

// holdGeneration waits while HoldJobs holds jobs; an interrupt or the
// model leaving ends the wait as it would end a long step.
func (s *Server) holdGeneration(j *job) bool {
	gate := s.hold.Held()
	if gate == nil {
		return true
	}
	s.gpu.Mark(service, j.label()+" held after step 1")
	select {
	case <-gate:
	case <-j.stopNext:
	case <-j.modelGone:
	case <-s.stop:
		return false
	}
	return true
}

// auxiliary runs an upscale or an interrogation: its own model occupies
// the GPU for the job (the checkpoint is not needed), and interrupts do
// not stop it.
func (s *Server) auxiliary(j *job) outcome {
	release := s.gpu.Occupy(service, j.route+" model on GPU for "+j.label())
	defer release(j.route + " model off GPU after " + j.label())
	s.mu.Lock()
	if j.route == "extras" {
		s.state.jobCount = 1 // one image
	}
	j.working = jobBytes
	s.notePeakLocked()
	s.mu.Unlock()
	defer s.dropWorking(j)
	if gate := s.hold.Held(); gate != nil {
		s.gpu.Mark(service, j.label()+" held")
		select {
		case <-gate:
		case <-s.stop:
			return aborted
		}
	}
	if !s.pause(j.duration) {
		return aborted
	}
	return finished
}

// dropWorking frees the job's tensors (torch_gc at the job's end).
func (s *Server) dropWorking(j *job) {
	s.mu.Lock()
	j.working = 0
	s.mu.Unlock()
}

// StartUIJob starts a generation as the Gradio UI would
// (wrap_gradio_gpu_call): it takes its place in the same queue lock now,
// shows in /progress as "task(...)" while it runs, and never goes through
// /sdapi. done is closed when it has ended.
func (s *Server) StartUIJob(d time.Duration) (done <-chan struct{}) {
	j := s.newJob("ui", "", true, d)
	j.stateJob = fmt.Sprintf("task(%016x)", j.n)
	j.gradio = true
	turn := s.enqueue(j)
	ch := make(chan struct{})
	s.ui.Add(1)
	go func() {
		defer s.ui.Done()
		defer close(ch)
		s.run(j, turn)
	}()
	return ch
}
