package admit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/jsonscan"
)

// clientHashLen is how many hex digits of the SHA-256 a client hash
// keeps: enough to tell the tabs of one site apart, short enough to read.
const clientHashLen = 16

// ClientHash is what the status shows of an image job's client_id: the
// first 16 hex digits (lowercase) of the SHA-256 of its UTF-8 bytes; ""
// for none. A browser computes the same from its own id
// (crypto.subtle.digest), while the id itself, which would let anyone
// who reads the status open that client's ComfyUI websocket, is never
// shown.
func ClientHash(clientID string) string {
	if clientID == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(clientID))
	return hex.EncodeToString(sum[:])[:clientHashLen]
}

// bodyClient returns the top-level "client_id" of an image job's JSON
// body (ComfyUI's POST /prompt), read from all of it as buffered for the
// wait: clients write it before or after a workflow of any size. "" when
// the body is not a JSON object with a string client_id. A body that
// does not name one (A1111's, with its images) is not scanned.
func bodyClient(head []byte) string {
	if !bytes.Contains(head, []byte(`"client_id"`)) {
		return ""
	}
	return jsonscan.StringMember(head, "client_id")
}
