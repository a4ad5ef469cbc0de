#!/usr/bin/env bash
# Build or run Caddy with the gpu_turnstile plugin from this checkout.
#
#   ./xcaddy.sh build [xcaddy build flags]  -> ./caddy
#   ./xcaddy.sh run   [caddy run flags]     -> build, then run (default: Caddyfile.example)
#   ./xcaddy.sh demo  [-engines LLM,IMAGE]  -> build, then run against simulated engines
#                                              (default ollama,comfyui; e.g. llamacpp,a1111)
#
# GOOS and GOARCH cross-build, e.g.
#   GOOS=windows GOARCH=amd64 CADDY_BIN=caddy.exe ./xcaddy.sh build
#
# Environment: CADDY_VERSION (default v2.11.9), CADDY_BIN (default ./caddy),
# MODULE_VERSION (default: from Git, see module_version).
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

# module_version is the plugin's version that `caddy list-modules
# --versions` shows: the tag at HEAD (v1.2.3), else a Go pseudo-version
# naming the commit (v1.2.4-0.20261202061500-0123456789ab after tag
# v1.2.3); nothing outside a Git checkout, and Go then shows
# v0.0.0-00010101000000-000000000000. Uncommitted changes are not marked.
module_version() {
	if [ -n "${MODULE_VERSION:-}" ]; then
		echo "$MODULE_VERSION"
		return
	fi
	command -v git >/dev/null && git rev-parse --verify -q HEAD >/dev/null 2>&1 || return 0
	# A copy inside another repository is not this module's history.
	[ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ] || return 0
	local tag base stamp hash
	if tag=$(git describe --tags --exact-match --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null); then
		echo "$tag"
		return
	fi
	stamp=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD) || return 0
	hash=$(git rev-parse --short=12 HEAD) || return 0
	if base=$(git describe --tags --abbrev=0 --match 'v[0-9]*.[0-9]*.[0-9]*' 2>/dev/null) &&
		[[ $base =~ ^(v[0-9]+\.[0-9]+\.)([0-9]+)$ ]]; then
		echo "${BASH_REMATCH[1]}$((BASH_REMATCH[2] + 1))-0.$stamp-$hash"
	else
		echo "v0.0.0-$stamp-$hash"
	fi
}

build() {
	local version xcaddy
	version=$(module_version) || version= # no version is better than no build
	# The pinned xcaddy, built for this machine: with GOOS or GOARCH set for
	# a cross build, `go tool xcaddy` would build xcaddy itself for the
	# target and fail to run it. -n builds it and prints its path.
	xcaddy=$(env -u GOOS -u GOARCH go tool -n xcaddy)
	"$xcaddy" build "$CADDY_VERSION" \
		--with "$MODULE${version:+@$version}=$PWD" \
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
