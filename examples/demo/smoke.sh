#!/usr/bin/env bash
# Runs the demo's scene once against the given Caddy binary and checks that
# its timeline shows the GPU changing hands without ever being shared.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-./caddy}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go run ./examples/demo -caddy "$bin" -once -llm-port 0 -image-port 0 | tee "$out"
for want in "state LLM" "state IMAGE" "ollama unload" "comfy  free" "chat C: first token" "overlaps=0" "demo finished"; do
	grep -q -- "$want" "$out" || { echo "demo smoke: output lacks \"$want\"" >&2; exit 1; }
done
echo "demo smoke: ok"
