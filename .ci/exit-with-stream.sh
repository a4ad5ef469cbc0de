#!/usr/bin/env bash
# Checks that an open event stream (the status page left open) does not
# keep Caddy from exiting: on SIGTERM, Caddy waits for open connections
# before it ends the config, so the stream must end as the server shuts
# down. Only a real process exit shows this; an in-process stop does not
# wait.
#   .ci/exit-with-stream.sh ./caddy
set -euo pipefail
bin=${1:-./caddy}
dir=$(mktemp -d)
trap 'kill "${curl_pid:-}" "${caddy_pid:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
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
	curl -fs "http://127.0.0.1:$port/?view=json" >/dev/null 2>&1 && break
	sleep 0.1
done
curl -sN "http://127.0.0.1:$port/?view=events" >"$dir/events" &
curl_pid=$!
for _ in $(seq 100); do
	grep -q '^event: status' "$dir/events" && break
	sleep 0.1
done
grep -q '^event: status' "$dir/events" || { echo "no status event on the stream"; cat "$dir/caddy.log"; exit 1; }
kill -TERM "$caddy_pid"
for _ in $(seq 100); do
	kill -0 "$caddy_pid" 2>/dev/null || { echo "exit with an open event stream: Caddy stopped"; exit 0; }
	sleep 0.1
done
echo "Caddy still runs 10 s after SIGTERM with an event stream open"
tail -20 "$dir/caddy.log"
exit 1
