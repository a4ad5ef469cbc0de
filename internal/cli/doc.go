// Package cli is the `caddy gpu-turnstile` command: status, hold, renew,
// release, cancel and events, talking to a running Caddy's admin
// endpoint as Caddy's own commands (reload, stop) do.
//
// Its exit codes are part of its interface, for scripts and game
// launchers; see ExitCodes and docs/cli.md.
package cli
