package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/notice"
)

// API is the error shape of an engine API: the one its clients parse.
type API = engine.Dialect

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
func ShapeOf(path, kind string) API { return kinds.Shape(path, kind) }

// RouteKind is the kind of engine that serves path (cleaned, lower case)
// by its route alone, or "" when the route does not say (OpenAI's /v1/,
// which every LLM engine serves, among them).
func RouteKind(path string) string {
	if k := kinds.Guess(path); k != nil {
		return k.Name
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
	case engine.DialectOpenAI:
		return map[string]any{"error": map[string]any{"message": e.Message, "type": notice.OpenAIErrorType(e.Status), "param": nil, "code": e.Code}}
	case engine.DialectComfyUI:
		return map[string]any{
			"error":       map[string]any{"type": e.Code, "message": e.Message, "details": "", "extra_info": map[string]any{}},
			"node_errors": map[string]any{},
		}
	case engine.DialectA1111:
		return map[string]any{"error": errorName(e.Code), "detail": e.Message, "body": "", "errors": e.Message}
	}
	return map[string]string{"error": e.Message}
}

// errorName is A1111's error name (a Python exception's, in CamelCase)
// for code.
func errorName(code string) string {
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
