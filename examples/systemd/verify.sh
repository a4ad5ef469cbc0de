#!/usr/bin/env bash
# Checks the units in this directory with `systemd-analyze verify`, each
# exactly as shipped, in a scratch root (--root) that holds this system's
# own units and stand-ins for the programs the units start, so nothing is
# installed on this host. systemd-analyze reports most mistakes (an
# unknown key, a value it cannot parse) as warnings and still exits 0:
# here any output is a failure.
#
#   examples/systemd/verify.sh
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "verify.sh: systemd-analyze not found (Debian: apt-get install systemd)" >&2
	exit 2
fi
sysunits=
for d in /usr/lib/systemd/system /lib/systemd/system; do
	[ -d "$d" ] && sysunits=$d && break
done
[ -n "$sysunits" ] || { echo "verify.sh: no system unit directory" >&2; exit 2; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/usr/lib/systemd" "$root/etc/systemd/system"
cp -a "$sysunits" "$root/usr/lib/systemd/system"

units=()
for u in *.service; do
	cp "$u" "$root/etc/systemd/system/"
	units+=("$u")
	# A stand-in for each program the unit runs: verify checks that it
	# is there and executable, nothing more.
	sed -n 's/^Exec[A-Za-z]*=[-@:+!]*\(\/[^ ]*\).*/\1/p' "$u" | while read -r prog; do
		mkdir -p "$root$(dirname "$prog")"
		[ -e "$root$prog" ] || printf '#!/bin/sh\nexit 0\n' >"$root$prog"
		chmod +x "$root$prog"
	done
done

out=$(systemd-analyze verify --root="$root" "${units[@]}" 2>&1) || {
	echo "$out" >&2
	exit 1
}
if [ -n "$out" ]; then
	echo "$out" >&2
	exit 1
fi
# What ollama.service is for: stopping it stops its runners too.
if [ "$(grep -c '^KillMode=' ollama.service)" != 1 ] || ! grep -qx 'KillMode=control-group' ollama.service; then
	echo "verify.sh: ollama.service must set KillMode=control-group, once" >&2
	exit 1
fi
echo "systemd-analyze verify: ${units[*]}: no findings ($(systemd-analyze --version | head -1))"
