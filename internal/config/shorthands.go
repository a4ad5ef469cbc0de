package config

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
)

// MarshalJSON writes the shorthands' URLs as top-level fields named after
// their options, first, as the settings have always been written.
func (s Settings) MarshalJSON() ([]byte, error) {
	type plain Settings
	b, err := json.Marshal(plain(s))
	if err != nil || len(s.Shorthands) == 0 {
		return b, err
	}
	var head bytes.Buffer
	head.WriteByte('{')
	for _, opt := range kinds.Shorthands() {
		if url := s.Shorthands[opt]; url != "" {
			k, _ := json.Marshal(opt)
			v, _ := json.Marshal(url)
			head.Write(k)
			head.WriteByte(':')
			head.Write(v)
			head.WriteByte(',')
		}
	}
	if len(b) == 2 { // {}
		head.Truncate(head.Len() - 1)
	}
	return append(head.Bytes(), b[1:]...), nil
}

// splitShorthands takes the shorthand options' fields out of a settings
// object: rest is the object without them.
func splitShorthands(b []byte) (rest []byte, short map[string]string, err error) {
	var raw map[string]json.RawMessage
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) || json.Unmarshal(b, &raw) != nil {
		return b, nil, nil // DecodeFields says what is wrong
	}
	for _, opt := range kinds.Shorthands() {
		v, ok := raw[opt]
		if !ok {
			continue
		}
		var url string
		if err := json.Unmarshal(v, &url); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", opt, err)
		}
		if short == nil {
			short = map[string]string{}
		}
		short[opt] = url
		delete(raw, opt)
	}
	if short == nil {
		return b, nil, nil
	}
	rest, err = json.Marshal(raw)
	return rest, short, err
}

// SetShorthand sets the URL of the shorthand option opt; "" disables it.
func (s *Settings) SetShorthand(opt, url string) {
	if url == "" {
		delete(s.Shorthands, opt)
		return
	}
	if s.Shorthands == nil {
		s.Shorthands = map[string]string{}
	}
	s.Shorthands[opt] = url
}
