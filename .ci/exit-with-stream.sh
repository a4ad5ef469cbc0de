#!/usr/bin/env bash
# Checks that an open event stream (the status page left open) does not
# keep Caddy from exiting: on SIGTERM, Caddy waits for open connections
# before it ends the config, so the stream must end as the server shuts
# down. Only a real process exit shows this; an in-process stop does not
# wait. It needs bash alone (its /dev/tcp), no curl or python.
#   .ci/exit-with-stream.sh ./caddy
set -euo pipefail
bin=${1:-./caddy}
dir=$(mktemp -d)
trap 'exec 3>&- 2>/dev/null || true; kill "${caddy_pid:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT

# A port nobody listens on, from the ephemeral range's upper part.
for _ in $(seq 50); do
	port=$((40000 + RANDOM % 20000))
	(exec 9<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
done
cat >"$dir/Caddyfile" <<CADDY
{
	admin off
	gpu_turnstile {
		ollama http://127.0.0.1:9
	}
}
http://127.0.0.1:$port {
	gpu_turnstile_status
}
CADDY
"$bin" run --config "$dir/Caddyfile" >"$dir/caddy.log" 2>&1 &
caddy_pid=$!
for _ in $(seq 100); do
	(exec 9<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.1
done

# The stream, as a browser's EventSource opens it.
exec 3<>"/dev/tcp/127.0.0.1/$port"
printf 'GET /?view=events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n' >&3
seen=""
while IFS= read -r -t 10 line <&3; do
	case "$line" in "event: status"*) seen=yes; break ;; esac
done
[ -n "$seen" ] || { echo "no status event on the stream"; cat "$dir/caddy.log"; exit 1; }

kill -TERM "$caddy_pid"
for _ in $(seq 100); do
	kill -0 "$caddy_pid" 2>/dev/null || { echo "exit with an open event stream: Caddy stopped"; exit 0; }
	sleep 0.1
done
echo "Caddy still runs 10 s after SIGTERM with an event stream open"
tail -20 "$dir/caddy.log"
exit 1
