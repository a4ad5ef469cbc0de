package a1111test

import (
	"math"
	"net/http"
	"time"
)

// state is modules.shared_state.State, the one record of the running job
// that /progress reads. Its fields are guarded by Server.mu.
type state struct {
	skipped, interrupted, stoppingGeneration bool
	job                                      string
	jobCount, jobNo                          int
	jobTimestamp                             string
	samplingStep, samplingSteps              int
	timeStart                                time.Time
}

// begin is State.begin: job_count is -1 until the job says how many images
// it makes (processing sets it once the model is ready). It clears the
// interrupt flags, so an interrupt sent before a job began does nothing to
// it. sampling_steps keeps the last job's value until sampling starts.
func (st *state) begin(job string) {
	st.samplingStep = 0
	st.timeStart = time.Now()
	st.jobCount = -1
	st.jobNo = 0
	st.jobTimestamp = time.Now().Format("20060102150405")
	st.skipped, st.interrupted, st.stoppingGeneration = false, false, false
	st.job = job
}

// end is State.end. It leaves the interrupt flags (and sampling counts)
// as they were: /progress shows "interrupted" after an interrupted API job
// until the next job begins.
func (st *state) end() {
	st.job = ""
	st.jobCount = 0
}

// endGradio is what wrap_gradio_call does after a UI job: it also clears
// the flags.
func (st *state) endGradio() {
	st.end()
	st.skipped, st.interrupted, st.stoppingGeneration = false, false, false
}

// dict is State.dict, /progress's "state".
func (st *state) dict() map[string]any {
	return map[string]any{
		"skipped": st.skipped, "interrupted": st.interrupted, "stopping_generation": st.stoppingGeneration,
		"job": st.job, "job_count": st.jobCount, "job_timestamp": st.jobTimestamp, "job_no": st.jobNo,
		"sampling_step": st.samplingStep, "sampling_steps": st.samplingSteps,
	}
}

// progress is progressapi, not under the queue lock. Idle (job_count 0)
// it answers progress 0 and eta_relative 0; otherwise it computes them as
// A1111 does, from 0.01 up, which with job_count -1 stays at 0.01. There
// are no live previews at the fake's step counts, so current_image is
// null, and no stage sets textinfo.
func (s *Server) progress(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	out := map[string]any{"progress": 0.0, "eta_relative": 0.0, "state": st.dict(), "current_image": nil, "textinfo": nil}
	if st.jobCount != 0 {
		p := 0.01
		if st.jobCount > 0 {
			p += float64(st.jobNo) / float64(st.jobCount)
		}
		if st.samplingSteps > 0 {
			p += 1 / float64(st.jobCount) * float64(st.samplingStep) / float64(st.samplingSteps)
		}
		elapsed := time.Since(st.timeStart).Seconds()
		eta := elapsed / p
		out["eta_relative"] = finite(eta - elapsed)
		out["progress"] = math.Min(p, 1)
	}
	writeJSON(w, http.StatusOK, out)
}

// finite keeps a ratio JSON can carry (A1111 would have raised).
func finite(f float64) float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0
	}
	return f
}

// interrupt is interruptapi: it sets state.interrupted and answers {} at
// once. The running generation stops at its next step; a job still
// waiting for the lock is not affected (its begin clears the flag).
func (s *Server) interrupt(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.state.interrupted = true
	j := s.running
	s.mu.Unlock()
	if j != nil {
		j.stopAtNextStep()
		s.gpu.Mark(service, "interrupt during "+j.label())
	} else {
		s.gpu.Mark(service, "interrupt while idle")
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

// skip is POST /sdapi/v1/skip: it skips the current image, which for the
// fake's one-image jobs ends the generation at its next step like an
// interrupt. The route returns None, so it answers null.
func (s *Server) skip(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.state.skipped = true
	j := s.running
	s.mu.Unlock()
	if j != nil {
		j.stopAtNextStep()
		s.gpu.Mark(service, "skip during "+j.label())
	}
	writeJSON(w, http.StatusOK, nil)
}
