#!/usr/bin/env bash
# Builds the real Ollama server (CPU only) at the version this module
# requires in go.mod, caches it, and prints the binary's path on stdout.
# Everything else goes to stderr. A cached binary is reused as is.
#
#   OLLAMA_BIN=$(.ci/ollama.sh) go test -run TestRealOllama .
#
# `go install github.com/ollama/ollama@VERSION` does not work: module zips
# leave out every vendor/ directory, and llama.cpp's header-only
# dependencies live in llama/llama.cpp/vendor. They are put back here from
# Debian's packages (nlohmann-json3-dev, libstb-dev) and from the Go module
# github.com/gen2brain/malgo, which ships the same miniaudio.h.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '%s\n' "$*" >&2; }

MALGO=github.com/gen2brain/malgo@v0.11.24 # miniaudio 0.11.23, as vendored by llama.cpp in Ollama v0.17.4

version=$(go list -m -f '{{.Version}}' github.com/ollama/ollama)
cache=${GPU_TURNSTILE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpu-turnstile}
bin=$cache/ollama-$version/ollama

if [ -x "$bin" ] && [ -s "$bin" ]; then
	log "ollama $version: cached at $bin"
	echo "$bin"
	exit 0
fi

# Header-only C/C++ dependencies.
missing=()
[ -f /usr/include/nlohmann/json.hpp ] || missing+=(nlohmann-json3-dev)
[ -f /usr/include/stb/stb_image.h ] || missing+=(libstb-dev)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
if [ ${#missing[@]} -gt 0 ]; then
	log "installing ${missing[*]}"
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
fi

src=$(go mod download -json "github.com/ollama/ollama@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
malgo=$(cd / && GOFLAGS=-mod=mod go mod download -json "$MALGO" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src" ] || { log "ollama $version source not found ($src)"; exit 1; }
[ -f "$malgo/miniaudio.h" ] || { log "miniaudio.h not found in $MALGO ($malgo)"; exit 1; }

mkdir -p "$(dirname "$bin")"
work=$(mktemp -d "$(dirname "$bin")/build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

log "building ollama $version (CPU only) in $work"
cp -R "$src/." "$work/src"
chmod -R u+w "$work/src"

# The layout the cgo include paths (-I.../llama.cpp/vendor) expect.
vendor=$work/src/llama/llama.cpp/vendor
mkdir -p "$vendor/nlohmann" "$vendor/stb" "$vendor/miniaudio"
cp -R /usr/include/nlohmann/. "$vendor/nlohmann/"
cp /usr/include/stb/stb_image.h "$vendor/stb/"
cp "$malgo/miniaudio.h" "$vendor/miniaudio/"

start=$(date +%s)
(
	cd "$work/src"
	# No C debug information (cgo's default is -g -O2): the binary is
	# stripped anyway, and llama.cpp's C++ compiles faster without it.
	CGO_ENABLED=1 CGO_CFLAGS=-O2 CGO_CXXFLAGS=-O2 GOFLAGS=-buildvcs=false go build -trimpath \
		-ldflags "-s -w -X=github.com/ollama/ollama/version.Version=${version#v} -X=github.com/ollama/ollama/server.mode=release" \
		-o "$work/ollama" .
) >&2
mv -f "$work/ollama" "$bin"
log "ollama $version built in $(($(date +%s) - start)) s: $bin"
echo "$bin"
