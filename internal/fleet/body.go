package fleet

import (
	"bytes"
	"net/url"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/jsonscan"
)

// Model returns the "model" a JSON body names at its top level; "" if
// none (or if the body is not read to that member).
func Model(body []byte) string { return jsonscan.StringMember(body, "model") }

// bodyClient returns the top-level "client_id" of a JSON body (ComfyUI's
// POST /prompt); "" if none.
func bodyClient(body []byte) string {
	if !bytes.Contains(body, []byte(`"client_id"`)) {
		return "" // no scan of a body that names none (an image's)
	}
	return jsonscan.StringMember(body, "client_id")
}

// parseQuery parses a raw query, ignoring malformed pairs.
func parseQuery(raw string) url.Values {
	v, _ := url.ParseQuery(raw)
	return v
}
