#!/usr/bin/env bash
# Runs the demo's scene once against the given Caddy binary, with Ollama
# and ComfyUI and then with llama.cpp and A1111, and checks that each
# timeline shows the GPU changing hands without ever being shared.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-./caddy}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# scene ENGINES WANT... runs the scene with -engines ENGINES and checks
# that its output has every WANT.
scene() {
	local engines=$1
	shift
	go run ./examples/demo -caddy "$bin" -once -llm-port 0 -image-port 0 -engines "$engines" | tee "$out"
	for want in "$@"; do
		grep -q -- "$want" "$out" || { echo "demo smoke ($engines): output lacks \"$want\"" >&2; exit 1; }
	done
}

scene ollama,comfyui "state LLM" "state IMAGE" "ollama unload" "comfy  free" "chat C: first token" "overlaps=0" "demo finished"
scene llamacpp,a1111 "state LLM" "state IMAGE" "llamacpp exit" "a1111  checkpoint off GPU" "image: A1111 answered" "chat C: first token" "overlaps=0" "demo finished"
echo "demo smoke: ok"
