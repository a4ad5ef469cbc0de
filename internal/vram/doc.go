// Package vram reads a card's memory through nvidia-smi: the card's total
// and free memory as a stream (one long-lived `nvidia-smi --query-gpu=...
// -lms N` rather than a process per reading), and the memory of each
// compute process on demand (`--query-compute-apps`). It knows nothing of
// engines, models or admission: internal/gpu decides with what it reads.
package vram
