package comfytest

import (
	"cmp"
	"time"
)

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
	s.gpu.Mark("comfy", "taken "+j.id)
	select {
	case <-time.After(s.opts.TakeDelay):
	case <-j.killed:
		return // the process died between taking the job and starting it
	case <-s.stop:
		return
	}
	cached, alive := s.loadModels(j)
	if !alive {
		return // the process died between taking the job and starting it
	}
	// The job can be interrupted from its start on; an interrupt that
	// came before it was dropped, as ComfyUI clears the flag when a job
	// starts executing.
	s.mu.Lock()
	j.started = true
	s.mu.Unlock()
	s.interrupt.Store(j)
	s.gpu.Mark("comfy", "job "+j.id+" start")
	s.occupyWorking(j)
	msgs, duration := s.sendStart(j, cached)
	outcome := s.runNodes(j, cached, duration)
	s.releaseWorking(j)
	if outcome == "" {
		return // the server is closing
	}
	s.interrupt.CompareAndSwap(j, nil)
	final := finalMessage(j, outcome, time.Now().UnixMilli())
	msgs = append(msgs, []any{outcome, final})
	s.gpu.Mark("comfy", "job "+j.id+" end "+outcome)
	s.sendFinal(j, outcome, final)
	select {
	case <-time.After(s.opts.HistoryLag):
	case <-s.stop:
		return
	}
	if !s.recordHistory(j, epoch, outcome, msgs) {
		return // the process "died" during the job
	}
	s.gpu.Mark("comfy", "history "+j.id)
	s.broadcastStatus()
	s.sendTo(j.clientID, "executing", map[string]any{"node": nil, "prompt_id": j.id})
}

// loadModels puts the job's models on the GPU unless they are there
// already, and reports whether ComfyUI has the job's outputs cached;
// alive is false if a restart dropped the job first.
func (s *Server) loadModels(j *job) (cached, alive bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != j {
		return false, false
	}
	if s.release == nil {
		s.release = s.gpu.OccupyBytes("comfy", "load models for "+j.id, s.opts.ModelBytes)
		s.reserved = cmp.Or(s.opts.ModelBytes, defaultReserved)
	}
	return s.cache[string(j.prompt)], true
}

// defaultReserved is the reserved memory reported when Options.ModelBytes
// is not set.
const defaultReserved = 8 << 30

// occupyWorking charges what the job uses beyond its models, from its
// start (Options.JobBytes).
func (s *Server) occupyWorking(j *job) {
	extra := s.opts.JobBytes - s.opts.ModelBytes
	if extra <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == j && s.working == nil {
		s.working = s.gpu.OccupyBytes("comfy", "working memory of "+j.id, extra)
	}
}

// releaseWorking gives back the job's working memory at its end.
func (s *Server) releaseWorking(j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.working != nil {
		s.working("working memory of " + j.id + " given back")
		s.working = nil
	}
}

// sendStart sends execution_start and execution_cached, and returns them
// for the history with how long the job's nodes run: a cached job runs
// none of them and is done at once.
func (s *Server) sendStart(j *job, cached bool) (msgs [][]any, duration time.Duration) {
	start := time.Now().UnixMilli()
	msgs = [][]any{{"execution_start", map[string]any{"prompt_id": j.id, "timestamp": start}}}
	s.sendTo(j.clientID, "execution_start", msgs[0][1])
	cachedNodes := []string{}
	duration = j.duration
	if cached {
		cachedNodes, duration = j.nodes, time.Millisecond
	}
	msgs = append(msgs, []any{"execution_cached", map[string]any{"nodes": cachedNodes, "prompt_id": j.id, "timestamp": start}})
	s.sendTo(j.clientID, "execution_cached", msgs[1][1])
	return msgs, duration
}

// finalMessage is the data of the job's last execution message, outcome.
func finalMessage(j *job, outcome string, end int64) map[string]any {
	switch outcome {
	case "execution_error":
		return map[string]any{"prompt_id": j.id, "node_id": j.nodes[0], "node_type": "Fail", "exception_message": "simulated failure",
			"exception_type": "RuntimeError", "traceback": []string{}, "executed": []string{}, "timestamp": end}
	case "execution_interrupted":
		return map[string]any{"prompt_id": j.id, "node_id": j.nodes[0], "node_type": "KSampler", "executed": []string{}, "timestamp": end}
	}
	return map[string]any{"prompt_id": j.id, "timestamp": end}
}

// sendFinal sends the job's last execution message to its client; an
// interrupt of a job posted without a client id goes to every socket.
func (s *Server) sendFinal(j *job, outcome string, final map[string]any) {
	if outcome == "execution_interrupted" && j.clientID == "" {
		s.sendAll(outcome, final)
	} else {
		s.sendTo(j.clientID, outcome, final)
	}
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
			s.sendExecuting(j, j.nodes[i])
		}
		next := time.NewTimer(perNode)
		select {
		case <-done.C:
			next.Stop()
			s.sendExecuted(j)
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

// sendExecuting announces that node starts running: executing to the
// job's client, and progress_state to it or, for a job posted without a
// client id, to every socket.
func (s *Server) sendExecuting(j *job, node string) {
	s.sendTo(j.clientID, "executing", map[string]any{"node": node, "display_node": node, "prompt_id": j.id})
	progress := map[string]any{"prompt_id": j.id, "nodes": map[string]any{node: map[string]any{"state": "running", "node_id": node}}}
	if j.clientID == "" {
		s.sendAll("progress_state", progress)
	} else {
		s.sendTo(j.clientID, "progress_state", progress)
	}
}

// sendExecuted sends executed, with its preview image, for each of the
// job's output nodes.
func (s *Server) sendExecuted(j *job) {
	for _, o := range j.outputs {
		s.sendTo(j.clientID, "executed", map[string]any{"node": o, "display_node": o, "prompt_id": j.id,
			"output": map[string]any{"images": []map[string]string{{"filename": "ComfyUI_temp_00001_.png", "type": "temp"}}}})
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
