package llamacpptest

import (
	"encoding/json"
	"net/http"
	"strings"
)

// buildInfo is the build the fake's /props reports.
const buildInfo = "b0000-llamacpptest"

// errorTypes are format_error_response's types by status.
var errorTypes = map[int]string{
	400: "invalid_request_error",
	401: "authentication_error",
	403: "permission_error",
	404: "not_found_error",
	500: "server_error",
	501: "not_supported_error",
	503: "unavailable_error",
}

// formattedError is format_error_response's object. llama.cpp's JSON is
// nlohmann::ordered_json, so its keys come in this order on the wire.
type formattedError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Type    string `json:"type"`
}

// loadingError is the loading middleware's own literal, in its own order.
type loadingError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

// writeJSON writes v as llama.cpp does: compact, no trailing newline.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b)
}

// writeError writes llama.cpp's error envelope,
// {"error":{"code":N,"message":M,"type":T}}.
func writeError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, map[string]formattedError{"error": {Code: status, Message: message, Type: errorTypes[status]}})
}

// writeLoading is the answer of a server whose model is loading: 503
// {"error":{"message":"Loading model","type":"unavailable_error","code":503}},
// or for / and *.html an HTML page saying so, with the same status.
func writeLoading(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/" || strings.HasSuffix(r.URL.Path, ".html") {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("<html><body>The model is loading. Please wait.</body></html>"))
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, map[string]loadingError{
		"error": {Message: "Loading model", Type: "unavailable_error", Code: http.StatusServiceUnavailable}})
}

// writeProxyError is the router's answer when its request to a child
// fails before the child's headers: 500 and a plain-text body
// "proxy error: " + cpp-httplib's error string.
func writeProxyError(w http.ResponseWriter, httplibError string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	w.Write([]byte("proxy error: " + httplibError))
}
