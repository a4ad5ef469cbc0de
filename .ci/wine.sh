#!/usr/bin/env bash
# Windows, run and not only built, under Wine (Debian's wine64):
#   1. the Windows test binaries of lock, internal/presence, internal/testdir and
#      internal/config, each run from its package folder (for testdata);
#   2. examples/windows/README.md's PowerShell build line, its xcaddy
#      arguments taken from the README and run here (so the two cannot
#      drift), then caddy.exe version, list-modules and adapt of
#      examples/windows/Caddyfile;
#   3. the README's service recipe, its sc.exe lines run as written
#      against Wine's service control manager: the Caddy the service
#      starts must answer `caddy.exe gpu-turnstile status` and log to the
#      Caddyfile's path (see service_recipe for what Wine cannot show).
# Any failure fails CI. Installs wine64 and the MinGW compiler with apt-get
# when missing (as root, as CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."

WINE=/usr/lib/wine/wine64
WINESERVER=/usr/lib/wine/wineserver
README=examples/windows/README.md
PACKAGES=(lock internal/presence internal/config internal/testdir)

# The README's GOPROXY setting, in PowerShell. build_caddy does the same
# in bash (as xcaddy.sh does); a README that says something else fails
# here until both are changed together.
PS_GOPROXY="\$env:GOPROXY = (@((go env GOPROXY) -split '[,|]' | Where-Object { \$_ -notin 'direct', 'off' }) + 'off') -join '|'"

fail() {
	echo "wine.sh: $*" >&2
	exit 1
}

install_tools() {
	if [ -x "$WINE" ] && command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1; then
		return
	fi
	echo "installing wine64 and gcc-mingw-w64-x86-64"
	command -v apt-get >/dev/null 2>&1 || fail "wine64 or the MinGW compiler is missing, and there is no apt-get"
	(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
		wine64 gcc-mingw-w64-x86-64) >"$scratch/apt.log" 2>&1 || {
		cat "$scratch/apt.log"
		fail "apt-get install wine64 gcc-mingw-w64-x86-64 failed"
	}
}

# prepare_prefix makes a new Wine prefix, headless, and adds the
# bcryptprimitives.dll that Go's runtime needs and Wine 8.0 lacks.
prepare_prefix() {
	export WINEPREFIX="$scratch/prefix" WINEDEBUG=-all
	# Nothing here needs .NET (Mono) or a browser engine (Gecko); without
	# these overrides wineboot would try to install them.
	export WINEDLLOVERRIDES="mscoree,mshtml="
	unset DISPLAY WAYLAND_DISPLAY
	"$WINE" wineboot --init >"$scratch/wineboot.log" 2>&1 || {
		cat "$scratch/wineboot.log"
		fail "wineboot failed"
	}
	"$WINESERVER" -w
	# One wineserver for the whole step: with its default 3 s linger, a
	# Wine program started as it exits can find no service control
	# manager. cleanup and service_recipe end it.
	"$WINESERVER" -p
	x86_64-w64-mingw32-gcc -shared -O2 -s -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
		.ci/wine/bcryptprimitives.c -ladvapi32
}

# run_tests cross-compiles the test binaries and runs each under Wine.
# -trimpath as xcaddy builds: the Windows build of Caddy's dependencies
# (internal/config imports Caddy) is then shared with caddy.exe's build,
# which saves minutes on a fresh machine.
run_tests() {
	local start=$SECONDS pkg exe failed=0
	GOOS=windows GOARCH=amd64 go test -c -trimpath -o "$scratch/bin/" "${PACKAGES[@]/#/./}" || return 1
	echo "test binaries built in $((SECONDS - start)) s"
	for pkg in "${PACKAGES[@]}"; do
		start=$SECONDS
		exe="$scratch/bin/$(basename "$pkg").test.exe"
		if (cd "$pkg" && "$WINE" "$exe" -test.count=1 -test.timeout=5m); then
			echo "ok   $pkg under Wine ($((SECONDS - start)) s)"
		else
			echo "FAIL $pkg under Wine ($((SECONDS - start)) s)"
			failed=1
		fi
	done
	return "$failed"
}

# powershell_lines prints the lines of the README's powershell code blocks
# that match a pattern, without their indentation.
powershell_lines() {
	awk -v re="$1" '{ line = $0; sub(/^ +/, "", line) }
		line ~ /^```powershell/ { on = 1; next }
		line ~ /^```/ { on = 0 }
		on && line ~ re { print line }' "$README"
}

# build_caddy runs the README's build line: its GOPROXY setting done the
# same way in bash, then xcaddy with the line's arguments, for Windows.
build_caddy() {
	local line setting cmd args i proxies='' p xcaddy start=$SECONDS
	line=$(powershell_lines 'xcaddy build')
	if [ -z "$line" ] || [ "$(wc -l <<<"$line")" -ne 1 ]; then
		fail "$README: want one PowerShell line with xcaddy build"
	fi
	setting=${line%%; go tool xcaddy *}
	cmd=${line#"$setting; "}
	[ "$setting" = "$PS_GOPROXY" ] || fail "$README: the build line's GOPROXY setting is not the one .ci/wine.sh does in bash: $setting"
	[[ "$cmd" == "go tool xcaddy build "* ]] || fail "$README: the build line does not end in go tool xcaddy build: $cmd"
	read -ra args <<<"${cmd#go tool xcaddy }"
	# The line writes caddy.exe into the checkout; here it goes to scratch.
	for i in "${!args[@]}"; do
		[ "${args[$i]}" = --output ] && args[i+1]="$scratch/caddy.exe"
	done
	for p in $(go env GOPROXY | tr ',|' '  '); do
		case "$p" in direct | off) ;; *) proxies="$proxies$p|" ;; esac
	done
	# Built for this machine: with GOOS=windows, `go tool` would build
	# xcaddy itself for Windows.
	xcaddy=$(go tool -n xcaddy)
	echo "xcaddy ${args[*]}"
	GOOS=windows GOARCH=amd64 GOPROXY="${proxies}off" "$xcaddy" "${args[@]}" >"$scratch/xcaddy.log" 2>&1 || {
		tail -30 "$scratch/xcaddy.log"
		fail "the README's build line failed"
	}
	[ -f "$scratch/caddy.exe" ] || fail "the README's build line made no caddy.exe"
	echo "caddy.exe built in $((SECONDS - start)) s"
}

# check_caddy runs caddy.exe version, list-modules and adapt under Wine.
check_caddy() {
	local caddy="$scratch/caddy.exe" json
	"$WINE" "$caddy" version
	"$WINE" "$caddy" list-modules | grep -x 'gpu_turnstile' >/dev/null || fail "caddy.exe list-modules: no gpu_turnstile"
	json=$("$WINE" "$caddy" adapt --config examples/windows/Caddyfile --adapter caddyfile)
	grep -F '"filename":"C:\\ProgramData\\caddy\\caddy.log"' <<<"$json" >/dev/null ||
		fail "caddy.exe adapt examples/windows/Caddyfile: the log file is not C:\\ProgramData\\caddy\\caddy.log"
	echo "caddy.exe: version, list-modules (gpu_turnstile), adapt examples/windows/Caddyfile: ok"
}

# service_recipe runs the README's sc.exe lines as written against Wine's
# service control manager, waits for the service's Caddy to answer
# `caddy.exe gpu-turnstile status`, checks its log file, and deletes the
# service. Under Wine, Caddy cannot tell that it runs as a service: x/sys's
# IsWindowsService wants services.exe in session 0, and Wine runs every
# process in session 1. So Caddy serves as a plain process, Wine's
# `sc.exe start` waits for an answer that never comes, and what is checked
# is the service's command line, config and log, not the stop request.
service_recipe() {
	local dir="$WINEPREFIX/drive_c/caddy" log="$WINEPREFIX/drive_c/ProgramData/caddy/caddy.log" line n=0
	mkdir -p "$dir"
	cp "$scratch/caddy.exe" examples/windows/Caddyfile "$dir/"
	! "$WINE" "$dir/caddy.exe" gpu-turnstile status >/dev/null 2>&1 ||
		fail "a Caddy already answers on localhost:2019, so the service's could not be told apart"
	wait_for "Wine's service control manager to answer sc.exe query winmgmt" "$WINE" sc.exe query winmgmt
	while IFS= read -r line; do
		# Plain words and double-quoted words with backslashes mean the
		# same to PowerShell and to bash; a line with anything else is
		# not run here.
		[[ "$line" =~ ^sc\.exe\ [A-Za-z0-9\ .:=/\\\"-]+$ ]] || fail "$README: cannot run this sc.exe line as PowerShell would: $line"
		echo "$line"
		n=$((n + 1))
		if [[ "$line" == "sc.exe start "* ]]; then
			eval "\"\$WINE\" $line" >"$scratch/start.log" 2>&1 &
		else
			sc_line "$line"
		fi
	done < <(powershell_lines '^sc\.exe ')
	[ "$n" -eq 3 ] || fail "$README: want the 3 sc.exe lines (create, failure, start), found $n"
	wait_for "the service's Caddy to answer gpu-turnstile status" "$WINE" 'C:\caddy\caddy.exe' gpu-turnstile status
	"$WINE" 'C:\caddy\caddy.exe' gpu-turnstile status
	grep -q '"serving initial configuration"' "$log" || fail "no start-up in C:\\ProgramData\\caddy\\caddy.log"
	"$WINE" sc.exe delete caddy >/dev/null
	# Ends the service's Caddy and the waiting sc.exe start.
	"$WINESERVER" -k
	wait || true
	echo "service: created as written, Caddy started by it answered gpu-turnstile status and logged to C:\\ProgramData\\caddy\\caddy.log; deleted"
}

# sc_line runs one of the README's sc.exe lines, up to three times: Wine's
# service manager has been seen to fail a first `sc.exe create` on a fresh
# machine. Each failure's output is printed; before a create is tried
# again, a service half made by the last try is deleted.
sc_line() {
	local line=$1 try
	for try in 1 2 3; do
		if eval "\"\$WINE\" $line" >"$scratch/sc.log" 2>&1; then
			return
		fi
		echo "$line: failed (try $try of 3):"
		cat "$scratch/sc.log"
		[[ "$line" != "sc.exe create "* ]] || "$WINE" sc.exe delete caddy >/dev/null 2>&1 || true
		sleep 2
	done
	fail "$README: $line: failed three times"
}

# wait_for runs a command until it succeeds, for at most 60 s.
wait_for() {
	local what=$1 deadline=$((SECONDS + 60))
	shift
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || fail "waited 60 s for $what"
		sleep 1
	done
}

scratch=$(mktemp -d)
cleanup() {
	[ -z "${WINEPREFIX:-}" ] || "$WINESERVER" -k 2>/dev/null || true
	rm -rf "$scratch"
}
trap cleanup EXIT

total=$SECONDS
install_tools
prepare_prefix
echo "Wine prefix ready ($((SECONDS - total)) s)"
run_tests || fail "a Windows test failed under Wine"
build_caddy
check_caddy
service_recipe
echo "windows under Wine: $((SECONDS - total)) s"
