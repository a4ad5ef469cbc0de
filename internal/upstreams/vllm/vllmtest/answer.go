package vllmtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
)

// modelRoute serves chat, completions and embeddings: the request is
// queued while scheduling is paused, then run by the engine.
func (s *Server) modelRoute(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	var req struct {
		Model  *string `json:"model"`
		Stream bool    `json:"stream"`
	}
	body, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "", err.Error())
		return
	}
	if req.Model != nil && *req.Model != s.opts.Model {
		writeError(w, http.StatusNotFound, "NotFoundError", "model", fmt.Sprintf("The model `%s` does not exist.", *req.Model))
		return
	}
	path := r.URL.Path
	s.gpu.Mark(service, "request "+path)
	rq, err := s.eng.admit(r.Context(), path)
	if err != nil {
		return // the client (or the fake) went away while queued
	}
	defer s.eng.finish(rq)
	if path == "/v1/embeddings" {
		writeJSON(w, http.StatusOK, map[string]any{"id": "embd-fake", "object": "list", "created": time.Now().Unix(), "model": s.opts.Model,
			"data":  []map[string]any{{"object": "embedding", "index": 0, "embedding": []float64{0.1, 0.2, 0.3}}},
			"usage": map[string]int{"prompt_tokens": 1, "total_tokens": 1, "completion_tokens": 0}})
		s.gpu.Mark(service, "finished "+path+" stop")
		return
	}
	g := &generation{s: s, w: w, r: r, rq: rq, chat: path == "/v1/chat/completions", stream: req.Stream, created: time.Now().Unix()}
	g.run()
}

// writeError is vLLM's OpenAI error body.
func writeError(w http.ResponseWriter, status int, typ, param, msg string) {
	var p any
	if param != "" {
		p = param
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": p, "code": status}})
}

// generation is one paced answer.
type generation struct {
	s       *Server
	w       http.ResponseWriter
	r       *http.Request
	rq      *request
	chat    bool
	stream  bool
	created int64
}

// run generates the tokens and writes them as SSE chunks or as one answer.
// An abort ends it early with finish_reason "abort", as vLLM finishes the
// requests a sleep aborts; the answer is still a 200.
func (g *generation) run() {
	if g.stream {
		fakeserver.StartEvents(g.w, "text/event-stream; charset=utf-8")
		if g.chat {
			fakeserver.Event(g.w, "", g.chunk(map[string]string{"role": "assistant", "content": ""}, "", nil))
		}
	}
	var text strings.Builder
	finish, err := g.pace(func(tok string) {
		text.WriteString(tok)
		if g.stream {
			fakeserver.Event(g.w, "", g.chunk(map[string]string{"content": tok}, tok, nil))
		}
	})
	if err != nil {
		return // the client (or the fake) went away
	}
	g.s.gpu.Mark(service, "finished "+g.r.URL.Path+" "+finish)
	if g.stream {
		fakeserver.Event(g.w, "", g.chunk(map[string]string{}, "", finish))
		fakeserver.EventsDone(g.w)
		return
	}
	choice := map[string]any{"index": 0, "finish_reason": finish, "stop_reason": nil, "logprobs": nil}
	object := "text_completion"
	if g.chat {
		choice["message"] = map[string]any{"role": "assistant", "content": text.String(), "tool_calls": []any{}}
		object = "chat.completion"
	} else {
		choice["text"] = text.String()
	}
	writeJSON(g.w, http.StatusOK, map[string]any{"id": g.id(), "object": object, "created": g.created, "model": g.s.opts.Model,
		"choices": []any{choice}, "usage": map[string]int{"prompt_tokens": 1, "completion_tokens": g.s.opts.Tokens, "total_tokens": g.s.opts.Tokens + 1}})
}

// pace produces the tokens, one per engine step, holding after the first
// while HoldChats is in force. finish is "stop", or "abort" when a sleep
// aborted the request.
func (g *generation) pace(emit func(string)) (finish string, err error) {
	ctx := g.r.Context()
	p := fakeserver.Pacer{Tokens: g.s.opts.Tokens, Delay: g.s.opts.TokenDelay, Gate: &g.s.chats}
	err = p.Run(g.await, func(i int) error {
		if err := g.s.eng.step(ctx, g.rq); err != nil {
			return err
		}
		tok := fmt.Sprintf("tok%d ", i)
		if g.s.eng.emptyWeights() {
			tok = "!" // the weights came back empty after a level-2 sleep
		}
		emit(tok)
		if i == 0 {
			g.s.gpu.Mark(service, "generating "+g.r.URL.Path)
		}
		return nil
	})
	if err != nil {
		return abortOr(err)
	}
	return "stop", nil
}

// await blocks until ready is closed, the request is aborted (errAborted)
// or the client or the fake goes away.
func (g *generation) await(ready <-chan struct{}) error {
	ctx := g.r.Context()
	select {
	case <-ready:
		return nil
	case <-g.rq.abort:
		return errAborted
	case <-ctx.Done():
		return ctx.Err()
	case <-g.s.ctx.Done():
		return g.s.ctx.Err()
	}
}

// abortOr turns an abort into finish_reason "abort", any other error into
// an end without an answer.
func abortOr(err error) (string, error) {
	if errors.Is(err, errAborted) {
		return "abort", nil
	}
	return "", err
}

func (g *generation) id() string {
	if g.chat {
		return "chatcmpl-fake"
	}
	return "cmpl-fake"
}

// chunk is one SSE chunk: a chat delta, or a completion's text.
func (g *generation) chunk(delta map[string]string, text string, finish any) map[string]any {
	choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": finish}
	object := "text_completion"
	if g.chat {
		choice["delta"] = delta
		object = "chat.completion.chunk"
	} else {
		choice["text"] = text
	}
	return map[string]any{"id": g.id(), "object": object, "created": g.created, "model": g.s.opts.Model, "choices": []any{choice}}
}
