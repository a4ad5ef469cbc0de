package a1111test

import (
	"fmt"
	"net/http"
	"strings"
)

// place is where the checkpoint's weights are.
type place int

const (
	nowhere place = iota // not loaded: NotLoadedAtStart, or Forge after an unload
	onCPU                // A1111 after unload-checkpoint: in RAM, and it stays there
	onGPU
)

// checkpoint is the loaded model; guarded by Server.mu.
type checkpoint struct {
	title   string // the checkpoint the model holds ("" before the first load)
	where   place
	release func(string) // the "checkpoint on GPU" occupancy; nil when off the GPU
}

// checkpointInfo is one entry of the fake's models/Stable-diffusion.
type checkpointInfo struct {
	title, name, modelName, hash string
}

// checkpoints is the fake's library; the first is the one loaded at start.
var checkpoints = []checkpointInfo{
	{"v1-5-pruned-emaonly.safetensors [6ce0161689]", "v1-5-pruned-emaonly.safetensors", "v1-5-pruned-emaonly", "6ce0161689"},
	{"sd_xl_base_1.0.safetensors [31e35c80fc]", "sd_xl_base_1.0.safetensors", "sd_xl_base_1.0", "31e35c80fc"},
}

// lookupCheckpoint resolves a name as sd_models.checkpoint_aliases does:
// the title, the file name, the model name or the short hash.
func lookupCheckpoint(name string) (title string, ok bool) {
	for _, c := range checkpoints {
		if name == c.title || name == c.name || name == c.modelName || name == c.hash {
			return c.title, true
		}
	}
	return "", false
}

// modelName and modelHash are a checkpoint's model_name and short hash,
// as the info of a generation names them.
func modelName(title string) string {
	for _, c := range checkpoints {
		if c.title == title {
			return c.modelName
		}
	}
	return ""
}

func modelHash(title string) string {
	for _, c := range checkpoints {
		if c.title == title {
			return c.hash
		}
	}
	return ""
}

// loadCheckpoint brings a checkpoint onto the GPU; s.move is held. The
// memory is in use from the first moment of the load. A checkpoint that
// replaces another on the GPU takes over its occupancy.
func (s *Server) loadCheckpoint(title, why string) bool {
	s.mu.Lock()
	old := s.ckpt
	s.ckpt.title, s.ckpt.where = title, onGPU
	if s.ckpt.release == nil {
		s.ckpt.release = s.gpu.OccupyBytes(service, "checkpoint on GPU: "+title+" ("+why+")", s.opts.ModelBytes)
	} else if old.title != title {
		s.gpu.Mark(service, "switch checkpoint "+old.title+" to "+title+" ("+why+")")
	}
	s.notePeakLocked()
	s.mu.Unlock()
	if !s.pause(s.opts.LoadDelay) {
		return false
	}
	s.gpu.Mark(service, "checkpoint loaded: "+title)
	return true
}

// reloadModelWeights is A1111's sd_models.reload_model_weights with s.move
// held: it returns early when the model already holds the checkpoint,
// wherever that model is (so it never brings an unloaded model back), and
// otherwise loads the checkpoint onto the GPU. stuck says the model is on
// the CPU.
func (s *Server) reloadModelWeights(title, why string) (stuck, ok bool) {
	s.mu.Lock()
	c := s.ckpt
	s.mu.Unlock()
	if c.where != nowhere && c.title == title {
		return c.where == onCPU, true
	}
	return false, s.loadCheckpoint(title, why)
}

// unloadCheckpoint is unloadapi. It is not under the queue lock, so during
// a job it acts during the job. A1111 moves the model to the CPU and
// empties PyTorch's cache (send_model_to_cpu); Forge frees every model
// (unload_all_models, soft_empty_cache). Either way it answers {} once
// done. A generation running meanwhile loses its model: it fails at its
// next step, and its own tensors hold memory until it has ended.
func (s *Server) unloadCheckpoint(w http.ResponseWriter, r *http.Request) {
	s.unloads.Add(1)
	s.move.Lock()
	defer s.move.Unlock()
	s.mu.Lock()
	j, on := s.running, s.ckpt.where == onGPU
	s.mu.Unlock()
	if j != nil {
		s.gpu.Mark(service, "unload-checkpoint during "+j.label())
	}
	if on {
		if !s.pause(s.opts.UnloadDelay) {
			return
		}
		s.takeOffGPU()
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) takeOffGPU() {
	s.mu.Lock()
	why := "checkpoint off GPU: moved to CPU (unload-checkpoint)"
	s.ckpt.where = onCPU
	if s.opts.Forge {
		why = "checkpoint off GPU: freed (unload-checkpoint)"
		s.ckpt.where = nowhere
	}
	release := s.ckpt.release
	s.ckpt.release = nil
	if j := s.running; j != nil && j.sampling && release != nil {
		j.loseModel()
		j.release, release = release, nil
	}
	s.mu.Unlock()
	if release != nil {
		release(why)
	}
}

// reloadCheckpoint is reloadapi, not under the queue lock. A1111 sends the
// model to the GPU (send_model_to_device), loading it first if it never
// was; Forge does nothing. It answers {} once done.
func (s *Server) reloadCheckpoint(w http.ResponseWriter, r *http.Request) {
	s.reloads.Add(1)
	s.mu.Lock()
	j := s.running
	s.mu.Unlock()
	if j != nil {
		s.gpu.Mark(service, "reload-checkpoint during "+j.label())
	}
	if s.opts.Forge {
		s.gpu.Mark(service, "reload-checkpoint: a no-op on Forge")
		writeJSON(w, http.StatusOK, map[string]any{})
		return
	}
	s.move.Lock()
	defer s.move.Unlock()
	s.mu.Lock()
	c := s.ckpt
	if c.title == "" {
		c.title = s.option
	}
	s.mu.Unlock()
	if c.where != onGPU && !s.loadCheckpoint(c.title, "reload-checkpoint") {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

// setOptions is set_config. An unknown checkpoint is a RuntimeError. The
// route is not under the queue lock, but a changed sd_model_checkpoint
// runs its onchange, wrap_queued_call(reload_model_weights)
// (initialize_util.configure_opts_onchange), which is: the answer waits
// for the lock behind any running and queued job, and A1111 then loads the
// checkpoint onto the GPU with no job in /progress. Forge's
// reload_model_weights does nothing: its next generation loads the new
// checkpoint. An unchanged value runs nothing (opts.set returns early).
// The route returns None: null.
func (s *Server) setOptions(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	if !decodeBody(w, r, &req) {
		return
	}
	title := ""
	if v, ok := req["sd_model_checkpoint"]; ok && v != nil {
		name := fmt.Sprint(v)
		t, ok := lookupCheckpoint(name)
		if !ok {
			apiError(w, http.StatusInternalServerError, "RuntimeError", "", fmt.Sprintf("model '%s' not found", name))
			return
		}
		title = t
	}
	s.mu.Lock()
	for k, v := range req {
		if k != "sd_model_checkpoint" {
			s.options[k] = v
		}
	}
	changed := title != "" && title != s.option
	s.mu.Unlock()
	if changed && !s.switchCheckpointOption(title) {
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

func (s *Server) switchCheckpointOption(title string) bool {
	turn := s.queue.join()
	if turn != nil {
		s.gpu.Mark(service, "options: checkpoint change to "+title+" waits for the queue lock")
	}
	if !s.queue.await(turn, s.stop) {
		return false
	}
	defer s.queue.unlock()
	s.mu.Lock()
	s.option = title
	s.mu.Unlock()
	if s.opts.Forge {
		s.gpu.Mark(service, "options: checkpoint "+title+" set; Forge loads it at the next generation")
		return true
	}
	s.move.Lock()
	defer s.move.Unlock()
	_, ok := s.reloadModelWeights(title, "options")
	return ok
}

func (s *Server) getOptions(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	out := map[string]any{"sd_model_checkpoint": s.option}
	for k, v := range s.options {
		out[k] = v
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) sdModels(w http.ResponseWriter, r *http.Request) {
	list := []map[string]any{}
	for _, c := range checkpoints {
		list = append(list, map[string]any{"title": c.title, "model_name": c.modelName, "hash": c.hash,
			"sha256": strings.Repeat(c.hash[:2], 32), "filename": "/models/Stable-diffusion/" + c.name, "config": nil})
	}
	writeJSON(w, http.StatusOK, list)
}
