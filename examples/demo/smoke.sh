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
# The command line against a demo that keeps serving: the address it
# prints, a status, a hold taken and released.
demo_bin=$(mktemp -d)/demo
trap 'rm -f "$out"; rm -rf "$(dirname "$demo_bin")"; [ -n "${demo:-}" ] && kill "$demo" 2>/dev/null' EXIT
go build -o "$demo_bin" ./examples/demo
"$demo_bin" -caddy "$bin" -llm-port 0 -image-port 0 >"$out" 2>&1 &
demo=$!
for _ in $(seq 1 600); do
	grep -q "Still serving" "$out" && break
	kill -0 "$demo" 2>/dev/null || { cat "$out"; echo "demo smoke: the demo ended early" >&2; exit 1; }
	sleep 0.1
done
grep -q "Still serving" "$out" || { cat "$out"; echo "demo smoke: the demo's scene did not end within a minute" >&2; exit 1; }
addr=$(sed -n 's/^  admin endpoint: \([0-9.:]*\) .*/\1/p' "$out")
[ -n "$addr" ] || { cat "$out"; echo "demo smoke: the demo printed no admin endpoint" >&2; exit 1; }
cli() { "$bin" gpu-turnstile --address "$addr" "$@"; }
cli status
id=$(cli hold --owner smoke --ttl 1m)
cli status | grep -q "$id  smoke (admin)" || { echo "demo smoke: the status shows no hold $id" >&2; exit 1; }
cli release "$id"
kill -INT "$demo"
wait "$demo"
demo=
echo "demo smoke: ok"
