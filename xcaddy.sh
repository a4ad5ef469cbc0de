#!/usr/bin/env bash
# Build or run Caddy with the gpu_turnstile plugin from this checkout.
#
#   ./xcaddy.sh build [xcaddy build flags]  -> ./caddy
#   ./xcaddy.sh run   [caddy run flags]     -> build, then run (default: Caddyfile.example)
#   ./xcaddy.sh demo  [-engines LLM,IMAGE]  -> build, then run against simulated engines
#                                              (default ollama,comfyui; e.g. llamacpp,a1111)
#
# Environment: CADDY_VERSION (default v2.11.9), CADDY_BIN (default ./caddy).
set -euo pipefail
cd "$(dirname "$0")"

CADDY_VERSION=${CADDY_VERSION:-v2.11.9}
CADDY_BIN=${CADDY_BIN:-./caddy}
MODULE=github.com/gpu-turnstile/caddy-gpu-turnstile

# xcaddy runs `go get` on the plugin's module path even though it replaces
# it with this checkout. A module proxy refuses a path it has never seen,
# and with the default ","-separated GOPROXY list that refusal ends the
# build. Entries separated by "|" fall through on any error, and a final
# "off" makes Go settle for the local replacement.
# "direct" is dropped: it would ask the module path's VCS host, which does
# not know an unpublished module either.
proxies=
for p in $(go env GOPROXY | tr ',|' '  '); do
	case "$p" in direct | off) ;; *) proxies="$proxies$p|" ;; esac
done
export GOPROXY="${proxies}off"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

build() {
	go tool xcaddy build "$CADDY_VERSION" \
		--with "$MODULE=$PWD" \
		--output "$CADDY_BIN" "$@"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
build)
	build "$@"
	;;
run)
	build
	if [ $# -eq 0 ]; then
		set -- --config Caddyfile.example --adapter caddyfile
	fi
	exec "$CADDY_BIN" run "$@"
	;;
demo)
	build
	exec go run ./examples/demo -caddy "$CADDY_BIN" "$@"
	;;
*)
	echo "usage: $0 build|run|demo [args]" >&2
	exit 2
	;;
esac
