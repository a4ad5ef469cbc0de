package fakeserver

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Content types of the fakes' JSON answers.
const (
	JSON     = "application/json"
	JSONUTF8 = "application/json; charset=utf-8"
)

// WriteJSON answers status with v encoded by encoding/json's Encoder (a
// newline ends it), as contentType.
func WriteJSON(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// StartEvents sends the status (200) and headers of a server-sent event
// stream of contentType ("text/event-stream", maybe with a charset).
func StartEvents(w http.ResponseWriter, contentType string) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(http.StatusOK)
}

// Event sends one server-sent event, "data: JSON\n\n" after an
// "event: name\n" line if name is not empty, and flushes it.
func Event(w http.ResponseWriter, name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if name != "" {
		fmt.Fprintf(w, "event: %s\n", name)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	http.NewResponseController(w).Flush()
}

// EventsDone ends an OpenAI-compatible stream: "data: [DONE]\n\n". It is
// not flushed: the stream ends with the handler.
func EventsDone(w http.ResponseWriter) {
	fmt.Fprint(w, "data: [DONE]\n\n")
}
