package fleet

import (
	"bytes"
	"encoding/json"
	"net/url"
)

// Model returns the "model" a JSON body names at its top level; "" if
// none. It is the one place the body is read for it: a faster top-level
// member finder can replace it here.
func Model(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return ""
		}
		if key == "model" {
			var m string
			if dec.Decode(&m) != nil {
				return ""
			}
			return m
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}

// bodyClient returns the top-level "client_id" of a JSON body (ComfyUI's
// POST /prompt); "" if none.
func bodyClient(body []byte) string {
	if !bytes.Contains(body, []byte(`"client_id"`)) {
		return ""
	}
	var b struct {
		ClientID string `json:"client_id"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ""
	}
	return b.ClientID
}

// parseQuery parses a raw query, ignoring malformed pairs.
func parseQuery(raw string) url.Values {
	v, _ := url.ParseQuery(raw)
	return v
}
