package notice

import (
	"encoding/json"
	"net/http"
	"time"
)

// The chunks of each shape. Notices carry no created_at (Ollama) and an
// empty id (OpenAI): clients that check a stream's id keep to the
// engine's, which comes after them.
type (
	ollamaChat struct {
		Model   string        `json:"model"`
		Message ollamaMessage `json:"message"`
		Done    bool          `json:"done"`
	}
	ollamaMessage struct {
		Role     string `json:"role"`
		Content  string `json:"content"`
		Thinking string `json:"thinking"`
	}
	ollamaGenerate struct {
		Model    string `json:"model"`
		Response string `json:"response"`
		Thinking string `json:"thinking"`
		Done     bool   `json:"done"`
	}
	openAIChunk struct {
		ID      string         `json:"id"`
		Object  string         `json:"object"`
		Created int64          `json:"created"`
		Model   string         `json:"model"`
		Choices []openAIChoice `json:"choices"`
	}
	openAIChoice struct {
		Index        int         `json:"index"`
		Delta        openAIDelta `json:"delta"`
		FinishReason *string     `json:"finish_reason"`
	}
	openAIDelta struct {
		Role             string `json:"role"`
		Content          string `json:"content"`
		ReasoningContent string `json:"reasoning_content"`
	}
	openAIError struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	}
)

// contentType is the Content-Type of s's streams.
func (s Shape) contentType() string {
	if s == OpenAI {
		return "text/event-stream"
	}
	return "application/x-ndjson"
}

// noticeChunk is a notice with text for a request to model, in shape s.
func noticeChunk(s Shape, model, text string, now time.Time) []byte {
	switch s {
	case OllamaChat:
		return line(ollamaChat{Model: model, Message: ollamaMessage{Role: "assistant", Thinking: text}})
	case OllamaGenerate:
		return line(ollamaGenerate{Model: model, Thinking: text})
	}
	return event(openAIChunk{Object: "chat.completion.chunk", Created: now.Unix(), Model: model,
		Choices: []openAIChoice{{Delta: openAIDelta{Role: "assistant", ReasoningContent: text}}}})
}

// errorChunk is the last chunk of a stream that ends in an error: msg,
// with status the HTTP status it would have had (for OpenAI's type, if
// typ is "").
func errorChunk(s Shape, msg, typ string, status int) []byte {
	if s != OpenAI {
		return line(map[string]string{"error": msg})
	}
	if typ == "" {
		typ = OpenAIErrorType(status)
	}
	return event(map[string]openAIError{"error": {Message: msg, Type: typ}})
}

// OpenAIErrorType is OpenAI's error type for an HTTP status: a stream's
// closing error and a busy answer in OpenAI's shape both say it.
func OpenAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	}
	return "server_error"
}

// line is v as an NDJSON line.
func line(v any) []byte {
	b, _ := json.Marshal(v) // plain structs and strings: never fails
	return append(b, '\n')
}

// event is v as a server-sent event's data.
func event(v any) []byte {
	b, _ := json.Marshal(v)
	return append(append([]byte("data: "), b...), '\n', '\n')
}
