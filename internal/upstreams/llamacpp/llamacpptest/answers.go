package llamacpptest

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The answers of a model's process, in llama.cpp's shapes (trimmed to the
// fields clients read). Generations stop when the process is told to exit
// and are then cut (see exchange.cut).

func (x *exchange) text() string { return strings.Repeat("tok ", x.s.opts.Tokens) }

func (x *exchange) usage() map[string]int {
	return map[string]int{"completion_tokens": x.s.opts.Tokens, "prompt_tokens": 1, "total_tokens": x.s.opts.Tokens + 1}
}

// answerChat is /v1/chat/completions: an OpenAI chat.completion, or with
// "stream":true chat.completion.chunk events ending "data: [DONE]".
func answerChat(x *exchange) bool {
	id, created := "chatcmpl-llamacpptest", time.Now().Unix()
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"choices": []map[string]any{{"finish_reason": finish, "index": 0, "delta": delta}},
			"created": created, "id": id, "model": x.model, "system_fingerprint": buildInfo, "object": "chat.completion.chunk"}
	}
	if !x.stream {
		if !x.generate(nil) {
			x.cut()
			return false
		}
		writeJSON(x.w, http.StatusOK, map[string]any{
			"choices": []map[string]any{{"finish_reason": "stop", "index": 0,
				"message": map[string]any{"role": "assistant", "content": x.text()}}},
			"created": created, "model": x.model, "system_fingerprint": buildInfo,
			"object": "chat.completion", "usage": x.usage(), "id": id})
		return true
	}
	x.startStream()
	x.event("", chunk(map[string]any{"role": "assistant", "content": nil}, nil))
	if !x.generate(func(i int) { x.event("", chunk(map[string]any{"content": token(i)}, nil)) }) {
		x.cut()
		return false
	}
	last := chunk(map[string]any{}, "stop")
	last["usage"] = x.usage()
	x.event("", last)
	x.done()
	return true
}

// answerNativeCompletion is /completion (and /completions, /infill):
// llama.cpp's own shape; its stream ends on "stop":true, without [DONE].
func answerNativeCompletion(x *exchange) bool {
	result := func(content string, stop bool) map[string]any {
		m := map[string]any{"index": 0, "content": content, "tokens": []int{}, "id_slot": 0, "stop": stop, "model": x.model}
		if stop {
			m["tokens_predicted"], m["tokens_evaluated"], m["stop_type"] = x.s.opts.Tokens, 1, "eos"
		}
		return m
	}
	if !x.stream {
		if !x.generate(nil) {
			x.cut()
			return false
		}
		writeJSON(x.w, http.StatusOK, result(x.text(), true))
		return true
	}
	x.startStream()
	if !x.generate(func(i int) { x.event("", result(token(i), false)) }) {
		x.cut()
		return false
	}
	x.event("", result("", true))
	return true
}

// answerOAICompletion is /v1/completions: an OpenAI text_completion.
func answerOAICompletion(x *exchange) bool {
	id, created := "cmpl-llamacpptest", time.Now().Unix()
	result := func(text string, finish any) map[string]any {
		return map[string]any{"choices": []map[string]any{{"text": text, "index": 0, "logprobs": nil, "finish_reason": finish}},
			"created": created, "model": x.model, "system_fingerprint": buildInfo, "object": "text_completion", "id": id}
	}
	if !x.stream {
		if !x.generate(nil) {
			x.cut()
			return false
		}
		r := result(x.text(), "stop")
		r["usage"] = x.usage()
		writeJSON(x.w, http.StatusOK, r)
		return true
	}
	x.startStream()
	if !x.generate(func(i int) { x.event("", result(token(i), nil)) }) {
		x.cut()
		return false
	}
	x.event("", result("", "stop"))
	x.done()
	return true
}

// answerResponses is /v1/responses: an OpenAI response, or with
// "stream":true its typed events.
func answerResponses(x *exchange) bool {
	response := func(status, text string) map[string]any {
		return map[string]any{"id": "resp_llamacpptest", "object": "response", "created_at": time.Now().Unix(),
			"model": x.model, "status": status, "output": []map[string]any{{"type": "message", "id": "msg_llamacpptest",
				"status": status, "role": "assistant", "content": []map[string]any{{"type": "output_text", "text": text, "annotations": []any{}}}}}}
	}
	if !x.stream {
		if !x.generate(nil) {
			x.cut()
			return false
		}
		writeJSON(x.w, http.StatusOK, response("completed", x.text()))
		return true
	}
	x.startStream()
	x.event("response.created", map[string]any{"type": "response.created", "response": response("in_progress", "")})
	if !x.generate(func(i int) {
		x.event("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "delta": token(i)})
	}) {
		x.cut()
		return false
	}
	x.event("response.completed", map[string]any{"type": "response.completed", "response": response("completed", x.text())})
	return true
}

func answerNativeEmbedding(x *exchange) bool {
	writeJSON(x.w, http.StatusOK, []map[string]any{{"index": 0, "embedding": [][]float64{{0.1, 0.2, 0.3}}}})
	return true
}

func answerOAIEmbedding(x *exchange) bool {
	writeJSON(x.w, http.StatusOK, map[string]any{"model": x.model, "object": "list",
		"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1},
		"data":  []map[string]any{{"embedding": []float64{0.1, 0.2, 0.3}, "index": 0, "object": "embedding"}}})
	return true
}

func answerRerank(x *exchange) bool {
	writeJSON(x.w, http.StatusOK, map[string]any{"model": x.model, "object": "list",
		"usage":   map[string]int{"prompt_tokens": 1, "total_tokens": 1},
		"results": []map[string]any{{"index": 0, "relevance_score": 0.5}}})
	return true
}

func answerTokenize(x *exchange) bool {
	writeJSON(x.w, http.StatusOK, map[string]any{"tokens": []int{1, 2, 3}})
	return true
}

func answerDetokenize(x *exchange) bool {
	writeJSON(x.w, http.StatusOK, map[string]any{"content": "tok tok tok"})
	return true
}

func answerApplyTemplate(x *exchange) bool {
	writeJSON(x.w, http.StatusOK, map[string]any{"prompt": "<|user|>hi<|assistant|>"})
	return true
}

// answerSlots is GET /slots: the process's slots (4, as with
// n_parallel auto).
func answerSlots(x *exchange) bool {
	slots := make([]map[string]any, 4)
	for i := range slots {
		slots[i] = map[string]any{"id": i, "n_ctx": 4096, "speculative": false, "is_processing": false}
	}
	writeJSON(x.w, http.StatusOK, slots)
	return true
}

func answerMetrics(x *exchange) bool {
	x.w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(x.w, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n")
	return true
}

func answerLora(x *exchange) bool {
	writeJSON(x.w, http.StatusOK, []any{})
	return true
}

// answerChildProps is a router child's /props (GET /props?model=).
func answerChildProps(x *exchange) bool {
	writeJSON(x.w, http.StatusOK, x.s.modelProps(x.c.m, false))
	return true
}
