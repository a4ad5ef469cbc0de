package notice

import "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/jsonscan"

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
// not a well-formed JSON object does not stream: when unknown, no
// notice. Nothing is decoded but the top-level "model" and "stream"
// (internal/jsonscan), the first of each if named twice.
func Read(s Shape, body []byte) (model string, streams bool) {
	if !jsonscan.Object(body) {
		return "", false
	}
	streams = s.streamsByDefault()
	if raw, ok := jsonscan.Member(body, "stream"); ok && !jsonscan.IsNull(raw) {
		if streams, ok = jsonscan.Bool(raw); !ok {
			return "", false
		}
	}
	if raw, ok := jsonscan.Member(body, "model"); ok {
		if model, ok = jsonscan.String(raw); !ok {
			return "", false
		}
	}
	return model, streams
}
