package admit

import (
	"fmt"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// StatusClientClosed is the status Caddy logs for a client that went
// away.
const StatusClientClosed = 499

// ClientGone is the error for a request whose client went away; while
// says when ("after waiting 2s for the GPU").
func ClientGone(while string) error {
	return caddyhttp.Error(StatusClientClosed, fmt.Errorf("gpu_turnstile: client went away %s", while))
}
