// Package realollama runs the real Ollama server for integration tests: it
// finds the binary (.ci/ollama.sh builds it), starts `ollama serve` on a
// loopback port with its own model directory, writes small random-weight
// GGUF models and registers them, and finds the `ollama runner` processes
// that hold a loaded model's memory, including runners orphaned when their
// server was killed.
//
// Everything but this comment is Linux-only (it reads /proc).
package realollama
