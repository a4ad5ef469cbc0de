#!/usr/bin/env bash
# Builds the Caddy binary the image ships, then checks it: static, with
# the plugin, and adapting the configs the image and the compose stack
# use. The Dockerfile's builder stage runs this script and so does CI
# (.ci/run), so a step that breaks the image build breaks CI too, even
# where no Docker engine runs.
#
#   examples/docker/build.sh [OUT]     -> OUT (default ./caddy)
#
# The build itself is ./xcaddy.sh build (the pinned xcaddy, and the
# GOPROXY list that lets Go settle for this checkout); CGO_ENABLED=0 makes
# the binary static, so it runs on any image (the runtime image is
# Alpine's musl, the builder Debian's glibc).
set -euo pipefail
cd "$(dirname "$0")/../.."

out=${1:-./caddy}
case "$out" in */*) ;; *) out=./$out ;; esac
mkdir -p "$(dirname "$out")"

fail() { echo "build.sh: $*" >&2; exit 1; }

export CGO_ENABLED=0
CADDY_BIN=$out ./xcaddy.sh build

# Static: the Go build says so, and so does the ELF file where a tool
# that reads it is at hand (`file` on most systems; glibc's ldd in the
# Debian builder image, which has no `file`).
# (grep reads all of its input, without -q: with pipefail, a writer cut
# off by an early exit would fail the check.)
go version -m "$out" | grep -E '^[[:space:]]+build[[:space:]]+CGO_ENABLED=0$' >/dev/null ||
	fail "$out was not built with CGO_ENABLED=0"
if command -v file >/dev/null 2>&1; then
	info=$(file -b "$out")
	case "$info" in *"statically linked"*) ;; *) fail "$out is not static: $info" ;; esac
	echo "static: $info"
elif command -v ldd >/dev/null 2>&1; then
	info=$(ldd "$out" 2>&1 || true)
	case "$info" in
	*"not a dynamic executable"* | *"statically linked"*) ;;
	*) fail "$out is not static: $info" ;;
	esac
	echo "static: ldd: $(sed 's/^[[:space:]]*//' <<<"$info")"
else
	echo "static: CGO_ENABLED=0 (no file or ldd here to read the ELF header)"
fi

"$out" version
"$out" list-modules | grep -x gpu_turnstile >/dev/null || fail "$out lacks the gpu_turnstile module"
for f in examples/workstation/Caddyfile examples/compose/Caddyfile; do
	"$out" adapt --config "$f" --adapter caddyfile >/dev/null || fail "$f does not adapt"
	echo "adapts: $f"
done
