package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// API is the error shape of an engine API: the one its clients parse.
type API uint8

const (
	// Ollama answers {"error": "..."}, which is also the shape of a
	// route whose API is not known.
	Ollama API = iota
	// OpenAI (/v1/ on every LLM engine, llama.cpp, llama-swap and vLLM
	// everywhere) answers {"error": {"message", "type", "param", "code"}}.
	OpenAI
	// ComfyUI answers {"error": {"type", "message", "details",
	// "extra_info"}, "node_errors": {}}.
	ComfyUI
	// A1111 (and Forge) answers {"error", "detail", "body", "errors"}.
	A1111
)

// Error is an answer the turnstile gives in place of an engine's.
type Error struct {
	Status int
	// Code names the cause (gpu_busy, gpu_deadlock, job_cancelled,
	// engine_unreachable, engine_timeout): ComfyUI's error type,
	// OpenAI's code, A1111's error in CamelCase.
	Code    string
	Message string
	// RetryAfter, if positive, is sent as Retry-After, in seconds.
	RetryAfter int
}

// ShapeOf is the error shape of a request to path (cleaned, lower case)
// that an engine of kind serves ("" if not known). An image engine
// answers in its own shape on every route; on an LLM engine, /v1/ is
// OpenAI's; an unknown engine is guessed from the route.
func ShapeOf(path, kind string) API {
	switch kind {
	case "comfyui":
		return ComfyUI
	case "a1111":
		return A1111
	}
	switch {
	case strings.HasPrefix(path, "/v1/") || strings.HasPrefix(path, "/v/"):
		return OpenAI
	case strings.HasPrefix(path, "/sdapi/"):
		return A1111
	}
	switch kind {
	case "ollama":
		return Ollama
	case "llamacpp", "llamaswap", "vllm":
		return OpenAI
	}
	if RouteKind(path) == "comfyui" {
		return ComfyUI
	}
	return Ollama
}

// comfyRoutes are the first segments of ComfyUI's routes, which it also
// serves under /api/.
var comfyRoutes = map[string]bool{
	"prompt": true, "queue": true, "history": true, "ws": true, "view": true, "view_metadata": true,
	"upload": true, "object_info": true, "system_stats": true, "interrupt": true, "free": true,
	"extensions": true, "settings": true, "userdata": true, "users": true, "internal": true,
	"embeddings": true, "experiment": true, "features": true, "jobs": true,
}

// ollamaRoutes are the first segments after /api/ of Ollama's routes.
var ollamaRoutes = map[string]bool{
	"generate": true, "chat": true, "embed": true, "embeddings": true, "tags": true, "show": true,
	"ps": true, "version": true, "pull": true, "push": true, "create": true, "copy": true,
	"delete": true, "blobs": true,
}

// RouteKind is the kind of engine that serves path (cleaned, lower case)
// by its route alone: "comfyui", "a1111", "ollama", or "" when the route
// does not say (OpenAI's /v1/, which every LLM engine serves, among
// them). Ollama's and ComfyUI's /api/ routes are told apart by name.
func RouteKind(path string) string {
	if strings.HasPrefix(path, "/sdapi/") {
		return "a1111"
	}
	rest, api := strings.CutPrefix(path, "/api/")
	if !api {
		rest = strings.TrimPrefix(path, "/")
	}
	first, _, _ := strings.Cut(rest, "/")
	switch {
	case api && ollamaRoutes[first]:
		return "ollama"
	case comfyRoutes[first]:
		return "comfyui"
	case api:
		return "ollama"
	}
	return ""
}

// EngineDown is the answer to a request whose engine could not be reached
// (502), or did not answer in time (504 with timeout), naming the engine
// by name and kind (name "" when the turnstile could not tell which).
// The engine's address belongs in the log, not in the answer.
func EngineDown(timeout bool, name, kind string) Error {
	who := "the engine"
	if name != "" {
		who = fmt.Sprintf("%s (%s)", name, kind)
	}
	if timeout {
		return Error{Status: http.StatusGatewayTimeout, Code: "engine_timeout",
			Message: "gpu_turnstile: " + who + " did not answer in time; it may be overloaded or stuck. Caddy's log has the address tried and the error"}
	}
	return Error{Status: http.StatusBadGateway, Code: "engine_unreachable",
		Message: "gpu_turnstile: " + who + " is not reachable; is it running? Caddy's log has the address tried and the error"}
}

// Write answers with e in the shape api. A client that has gone has
// nothing to be told, so the write's error is dropped.
func Write(w http.ResponseWriter, api API, e Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	json.NewEncoder(w).Encode(e.body(api))
}

// body is e in the shape api.
func (e Error) body(api API) any {
	switch api {
	case OpenAI:
		return map[string]any{"error": map[string]any{"message": e.Message, "type": openAIType(e.Status), "param": nil, "code": e.Code}}
	case ComfyUI:
		return map[string]any{
			"error":       map[string]any{"type": e.Code, "message": e.Message, "details": "", "extra_info": map[string]any{}},
			"node_errors": map[string]any{},
		}
	case A1111:
		return map[string]any{"error": a1111Name(e.Code), "detail": e.Message, "body": "", "errors": e.Message}
	}
	return map[string]string{"error": e.Message}
}

// openAIType is OpenAI's error type for status.
func openAIType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 400 && status < 500:
		return "invalid_request_error"
	}
	return "server_error"
}

// a1111Name is A1111's error name (a Python exception's, in CamelCase)
// for code.
func a1111Name(code string) string {
	if code == "gpu_busy" {
		return "GPUBusy"
	}
	var b strings.Builder
	for part := range strings.SplitSeq(code, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}
