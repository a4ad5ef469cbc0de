package a1111test

import "net/http"

// The simulated card and what else takes memory on it.
const (
	deviceTotal  = 24 << 30
	cudaContext  = 400 << 20 // this process's CUDA context: in cuda.system, never in reserved
	idleReserved = 64 << 20  // the few blocks PyTorch keeps after empty_cache
	jobBytes     = 1 << 30   // a running job's own tensors (activations, an upscaler)
	otherBytes   = 5 << 30   // what each occupancy of another service is taken to use
	ramTotal     = 64 << 30
	ramUsed      = 6 << 30
)

// reservedLocked is cuda.reserved.current: PyTorch's reserved memory in
// this process. s.mu is held.
func (s *Server) reservedLocked() int64 {
	n := int64(idleReserved)
	if s.ckpt.release != nil {
		n += s.opts.CheckpointBytes
	}
	if s.running != nil {
		n += s.running.working
	}
	return n
}

// notePeakLocked records the reserved memory's peak; s.mu is held.
func (s *Server) notePeakLocked() {
	s.peak = max(s.peak, s.reservedLocked())
}

// othersBytes estimates what the other services on the simulated GPU use.
func (s *Server) othersBytes() int64 {
	seen := map[string]bool{service: true}
	var n int64
	for _, e := range s.gpu.Events() {
		if !seen[e.Service] {
			seen[e.Service] = true
			n += int64(s.gpu.Users(e.Service)) * otherBytes
		}
	}
	return n
}

// memory is get_memory, not under the queue lock: ram from psutil (free
// and total are floats there), and cuda from torch. cuda.system is
// torch.cuda.mem_get_info, the whole device with other processes in it;
// the rest is torch.cuda.memory_stats, this process's own. Without CUDA,
// cuda is {"error":"unavailable"}.
func (s *Server) memory(w http.ResponseWriter, r *http.Request) {
	ram := map[string]any{"free": float64(ramTotal - ramUsed), "used": ramUsed, "total": float64(ramTotal)}
	if s.opts.NoCUDA {
		writeJSON(w, http.StatusOK, map[string]any{"ram": ram, "cuda": map[string]string{"error": "unavailable"}})
		return
	}
	others := s.othersBytes()
	s.mu.Lock()
	reserved, peak := s.reservedLocked(), s.peak
	s.mu.Unlock()
	total := int64(deviceTotal)
	used := min(int64(cudaContext)+reserved+others, total)
	if size := s.gpu.Total(); size > 0 {
		// A GPU with a size: the whole card as it is charged.
		total, used = size, size-s.gpu.Free()
	}
	// The caching allocator keeps some of what it reserves unallocated.
	allocated, allocatedPeak := reserved-reserved/8, peak-peak/8
	cuda := map[string]any{
		"system":    map[string]int64{"free": total - used, "used": used, "total": total},
		"active":    map[string]int64{"current": allocated, "peak": allocatedPeak},
		"allocated": map[string]int64{"current": allocated, "peak": allocatedPeak},
		"reserved":  map[string]int64{"current": reserved, "peak": peak},
		"inactive":  map[string]int64{"current": reserved - allocated, "peak": peak - allocatedPeak},
		"events":    map[string]int64{"retries": 0, "oom": 0},
	}
	writeJSON(w, http.StatusOK, map[string]any{"ram": ram, "cuda": cuda})
}
