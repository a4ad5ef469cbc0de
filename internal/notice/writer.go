package notice

import (
	"encoding/json"
	"net/http"
	"strings"
)

// errorHead bounds what of an error answer's body is kept for the last
// chunk: an error says what it is in its first words.
const errorHead = 16 << 10

// engineWriter is the answer's writer once the head has been sent:
// headers and status line are swallowed; a 2xx body passes through, any
// other is kept for the last chunk.
type engineWriter struct {
	w      http.ResponseWriter
	header http.Header // written to and never sent
	status int
	body   []byte // a failed answer's, up to errorHead
}

// Header implements http.ResponseWriter.
func (e *engineWriter) Header() http.Header {
	if e.header == nil {
		e.header = http.Header{}
	}
	return e.header
}

// WriteHeader implements http.ResponseWriter: it records the status.
func (e *engineWriter) WriteHeader(code int) {
	if e.status == 0 && code >= 200 {
		e.status = code
	}
}

// Write implements http.ResponseWriter.
func (e *engineWriter) Write(p []byte) (int, error) {
	if e.status == 0 {
		e.status = http.StatusOK
	}
	if !e.failed() {
		return e.w.Write(p)
	}
	if len(e.body) < errorHead {
		e.body = append(e.body, p[:min(len(p), errorHead-len(e.body))]...)
	}
	return len(p), nil
}

// FlushError lets http.ResponseController flush the stream
// (reverse_proxy's flush_interval).
func (e *engineWriter) FlushError() error {
	if e.failed() {
		return nil
	}
	return http.NewResponseController(e.w).Flush()
}

// Unwrap lets http.ResponseController reach the writer beneath
// (deadlines).
func (e *engineWriter) Unwrap() http.ResponseWriter { return e.w }

// failed reports whether the answer has a status other than 2xx.
func (e *engineWriter) failed() bool { return e.status != 0 && (e.status < 200 || e.status > 299) }

// errorOf is the message (and OpenAI's error type, if it says) of a
// failed answer's body: an error in Ollama's shape ({"error":"..."}),
// OpenAI's ({"error":{"message","type"}}), or the body's text.
func errorOf(body []byte, status int) (msg, typ string) {
	var v struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &v) == nil && len(v.Error) > 0 {
		var s string
		if json.Unmarshal(v.Error, &s) == nil && s != "" {
			return s, ""
		}
		var o openAIError
		if json.Unmarshal(v.Error, &o) == nil && o.Message != "" {
			return o.Message, o.Type
		}
	}
	if text := strings.TrimSpace(string(body)); text != "" {
		return text, ""
	}
	return http.StatusText(status), ""
}
