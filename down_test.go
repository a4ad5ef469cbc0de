package turnstile

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// checkDown checks an answer to a request whose engine is down: 502, the
// JSON of the API's shape (decoded into shape, whose message msg returns),
// naming the engine and not its address.
func checkDown[T any](t *testing.T, what string, r result, engine, addr string, msg func(T) string) {
	t.Helper()
	var shape T
	if r.err != nil || r.status != http.StatusBadGateway || r.header.Get("Content-Type") != "application/json" ||
		json.Unmarshal([]byte(r.body), &shape) != nil {
		t.Fatalf("%s: %d %s %v, want 502 JSON", what, r.status, r.body, r.err)
	}
	if m := msg(shape); !strings.Contains(m, engine+" is not reachable; is it running?") {
		t.Fatalf("%s: message %q does not name %s: %s", what, m, engine, r.body)
	}
	if strings.Contains(r.body, addr) || strings.Contains(r.body, "127.0.0.1") {
		t.Fatalf("%s: the answer gives the engine's address: %s", what, r.body)
	}
}

type ollamaError struct{ Error string }
type openAIError struct {
	Error struct{ Message, Type, Code string }
}
type comfyError struct {
	Error      struct{ Type, Message string }
	NodeErrors map[string]any `json:"node_errors"`
}
type a1111Error struct{ Error, Detail string }

// An engine that is not running is answered 502 in the shape of the
// request's route, passthrough routes included, and the GPU is free
// again after each.
func TestEngineDownAnsweredInItsAPIShape(t *testing.T) {
	deadOllama, dead := fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("127.0.0.1:%d", freePort(t))
	h := newHarness(t, harnessOptions{ollamaURL: "http://" + deadOllama, comfyURL: "http://" + dead})
	h.waitIdle()
	ollama := func(e ollamaError) string { return e.Error }
	openAI := func(e openAIError) string {
		if e.Error.Type != "server_error" || e.Error.Code != "engine_unreachable" {
			return ""
		}
		return e.Error.Message
	}
	comfy := func(e comfyError) string {
		if e.NodeErrors == nil || e.Error.Type != "engine_unreachable" {
			return ""
		}
		return e.Error.Message
	}
	checkDown(t, "POST /api/chat", h.post(t.Context(), h.llm+"/api/chat", chatBody("llama3.2", false)), "ollama (ollama)", deadOllama, ollama)
	checkDown(t, "GET /api/tags", h.do("GET", h.llm+"/api/tags", ""), "ollama (ollama)", deadOllama, ollama)
	checkDown(t, "POST /v1/chat/completions", h.post(t.Context(), h.llm+"/v1/chat/completions",
		`{"model":"llama3.2","messages":[{"role":"user","content":"hi"}]}`), "ollama (ollama)", deadOllama, openAI)
	checkDown(t, "POST /prompt", h.post(t.Context(), h.image+"/prompt", promptBody(10)), "comfyui (comfyui)", dead, comfy)
	checkDown(t, "GET /object_info", h.do("GET", h.image+"/object_info", ""), "comfyui (comfyui)", dead, comfy)
	checkDown(t, "GET /api/queue", h.do("GET", h.image+"/api/queue", ""), "comfyui (comfyui)", dead, comfy)
	st := h.waitStatus("the GPU free after the failed forwards", func(st Status) bool {
		return st.State == "idle" && st.LLMInflight == 0 && st.Job == nil
	})
	if r := st.Engines[0].Reachable; r == nil || *r {
		t.Fatalf("ollama reachable %v after a refused forward", r)
	}
	// The GPU is to be had: a hold is granted at once.
	h.releaseHold(t, h.takeHold(t, "after", "1m"))
}

// A1111 is answered in its own shape, and its job ends with the failure.
func TestEngineDownAnsweredInA1111Shape(t *testing.T) {
	m := newMix(t, mixOptions{engines: []string{"a1111"}})
	m.waitIdle()
	addr := strings.TrimPrefix(m.a1111.URL(), "http://")
	m.a1111.Close()
	r := m.post(t.Context(), m.sites["a1111"]+"/sdapi/v1/txt2img", txt2imgBody())
	checkDown(t, "POST /sdapi/v1/txt2img", r, "a1111 (a1111)", addr, func(e a1111Error) string {
		if e.Error != "EngineUnreachable" {
			return ""
		}
		return e.Detail
	})
	m.waitStatus("the GPU free after the failed job", func(st Status) bool { return st.State == "idle" && st.Job == nil })
}
