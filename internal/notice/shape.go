package notice

import (
	"encoding/json"
	"io"
)

// Shape is the stream shape of an API whose requests get notices.
type Shape int

const (
	// OllamaChat is Ollama's /api/chat: NDJSON, the notice in
	// message.thinking.
	OllamaChat Shape = iota + 1
	// OllamaGenerate is Ollama's /api/generate: NDJSON, the notice in
	// thinking.
	OllamaGenerate
	// OpenAI is OpenAI's chat completions (/v1/chat/completions, and
	// llama.cpp's /chat/completions): server-sent events, the notice in
	// choices[0].delta.reasoning_content.
	OpenAI
)

// For is the shape of the streams of path (cleaned, lower case); ok is
// false for a route whose requests get no notice.
func For(path string) (_ Shape, ok bool) {
	switch path {
	case "/api/chat":
		return OllamaChat, true
	case "/api/generate":
		return OllamaGenerate, true
	case "/v1/chat/completions", "/chat/completions":
		return OpenAI, true
	}
	return 0, false
}

// streamsByDefault says whether a request that does not say streams:
// Ollama's do, OpenAI's do not.
func (s Shape) streamsByDefault() bool { return s != OpenAI }

// Read reads a request's whole JSON body for the model it names and
// whether it asks for a stream (its top-level "stream", the shape's
// default if absent or null). A body that is nil (not known in full) or
// not a JSON object does not stream: when unknown, no notice.
func Read(s Shape, body io.Reader) (model string, streams bool) {
	if body == nil {
		return "", false
	}
	dec := json.NewDecoder(body)
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	streams = s.streamsByDefault()
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch key {
		case "model":
			err = dec.Decode(&model)
		case "stream":
			var v *bool
			if err = dec.Decode(&v); v != nil {
				streams = *v
			}
		default:
			err = dec.Decode(&skip{})
		}
		if err != nil {
			return "", false
		}
	}
	if _, err := dec.Token(); err != nil {
		return "", false
	}
	return model, streams
}

// skip decodes a value it does not keep.
type skip struct{}

func (*skip) UnmarshalJSON([]byte) error { return nil }
