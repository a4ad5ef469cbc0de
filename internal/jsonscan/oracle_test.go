package jsonscan

import (
	"bytes"
	"encoding/json"
)

// decoderMember is encoding/json's answer for the first top-level member
// called name: the document read token by token up to it, its value
// decoded as a json.RawMessage.
func decoderMember(doc []byte, name string) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		if key == name {
			return raw, true
		}
	}
	return nil, false
}
