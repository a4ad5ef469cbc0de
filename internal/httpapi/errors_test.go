package httpapi

import (
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"

	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestShapeOf(t *testing.T) {
	for _, tc := range []struct {
		path, kind string
		want       API
	}{
		{"/api/chat", "ollama", Ollama},
		{"/api/tags", "", Ollama},
		{"/v1/chat/completions", "ollama", OpenAI},
		{"/v1/chat/completions", "", OpenAI},
		{"/completion", "llamacpp", OpenAI},
		{"/completion", "", Ollama},
		{"/prompt", "comfyui", ComfyUI},
		{"/api/queue", "comfyui", ComfyUI},
		{"/api/queue", "", ComfyUI},
		{"/ws", "", ComfyUI},
		{"/sdapi/v1/txt2img", "a1111", A1111},
		{"/sdapi/v1/txt2img", "llamaswap", A1111},
		{"/sdapi/v1/txt2img", "", A1111},
		{"/", "", Ollama},
	} {
		if got := ShapeOf(tc.path, tc.kind); got != tc.want {
			t.Errorf("ShapeOf(%q, %q) = %d, want %d", tc.path, tc.kind, got, tc.want)
		}
	}
}

func TestRouteKind(t *testing.T) {
	for path, want := range map[string]string{
		"/api/tags": "ollama", "/api/chat": "ollama", "/api/version": "ollama", "/api/unknown": "ollama",
		"/api/prompt": "comfyui", "/api/queue": "comfyui", "/prompt": "comfyui", "/view": "comfyui",
		"/upload/image": "comfyui", "/api/upload/image": "comfyui", "/sdapi/v1/options": "a1111",
		"/v1/models": "", "/health": "", "/": "",
	} {
		if got := RouteKind(path); got != want {
			t.Errorf("RouteKind(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestWriteShapes(t *testing.T) {
	e := EngineDown(false, "ollama", "ollama")
	for api, want := range map[API]string{
		Ollama:  `{"error":"gpu_turnstile: ollama (ollama) is not reachable; is it running? ` + "Caddy's log has the address tried and the error" + `"}`,
		OpenAI:  `"error":{"code":"engine_unreachable","message":"gpu_turnstile: ollama (ollama) is not reachable`,
		ComfyUI: `"node_errors":{}`,
		A1111:   `"error":"EngineUnreachable"`,
	} {
		w := httptest.NewRecorder()
		Write(w, api, e)
		body := w.Body.String()
		if w.Code != 502 || w.Header().Get("Content-Type") != "application/json" || !strings.Contains(body, want) || !json.Valid([]byte(body)) {
			t.Errorf("shape %d: %d %s, want 502 JSON with %s", api, w.Code, body, want)
		}
	}
	w := httptest.NewRecorder()
	Write(w, OpenAI, Error{Status: 429, Code: "gpu_busy", Message: "busy", RetryAfter: 7})
	if w.Header().Get("Retry-After") != "7" || !strings.Contains(w.Body.String(), `"type":"rate_limit_error"`) {
		t.Errorf("busy answer: %v %s", w.Header(), w.Body)
	}
	w = httptest.NewRecorder()
	Write(w, A1111, Error{Status: 503, Code: "gpu_busy", Message: "busy"})
	if !strings.Contains(w.Body.String(), `"error":"GPUBusy"`) || w.Header().Get("Retry-After") != "" {
		t.Errorf("A1111 busy answer: %v %s", w.Header(), w.Body)
	}
	if d := EngineDown(true, "", ""); d.Status != 504 || !strings.Contains(d.Message, "the engine did not answer in time") {
		t.Errorf("timeout with no engine named: %+v", d)
	}
}

// The dialects by the names the tables above use.
const (
	Ollama  = engine.DialectOllama
	OpenAI  = engine.DialectOpenAI
	ComfyUI = engine.DialectComfyUI
	A1111   = engine.DialectA1111
)
