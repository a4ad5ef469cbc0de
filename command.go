package turnstile

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/cli"
)

// `caddy gpu-turnstile ...`: status, hold, renew, release, cancel and
// events through the admin endpoint.
func init() {
	caddycmd.RegisterCommand(cli.Command())
}
