package comfytest

import "net/http"

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
		// vram_free counts PyTorch's reserved-but-unused memory inside
		// ComfyUI as free (here, a quarter of what its models reserve).
		idle := reserved / 4
		vramTotal, vramFree := int64(total), total-reserved-int64(s.gpu.Users("ollama"))*(5<<30)+idle
		if size := s.gpu.Total(); size > 0 {
			// A GPU with a size: the card's own free memory, as CUDA
			// reads it.
			vramTotal, vramFree = size, min(s.gpu.Free()+idle, size)
		}
		device = map[string]any{
			"name": "cuda:0 Simulated GPU : cudaMallocAsync", "type": "cuda", "index": 0,
			"vram_total": vramTotal, "vram_free": vramFree,
			"torch_vram_total": reserved, "torch_vram_free": idle,
		}
	}
	writeJSON(w, 200, map[string]any{
		"system":  map[string]any{"os": "posix", "comfyui_version": "0.3.64", "python_version": "3.12", "embedded_python": false},
		"devices": []map[string]any{device},
	})
}
