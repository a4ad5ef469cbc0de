package comfy

import (
	"bytes"
	"encoding/json"
)

// PromptID reads the top-level "prompt_id" of a /prompt response. body may
// be truncated (only a bounded prefix is captured): the id is found as long
// as it lies within the prefix, which it does in every ComfyUI version
// (prompt_id is the first key).
func PromptID(body []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", false
		}
		if key == "prompt_id" {
			tok, err := dec.Token()
			id, ok := tok.(string)
			if err != nil || !ok || id == "" {
				return "", false
			}
			return id, true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}
