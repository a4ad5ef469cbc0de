package ollamatest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
)

// genRequest is the union of the fields of /api/generate and /api/chat.
type genRequest struct {
	Model     string           `json:"model"`
	Prompt    *string          `json:"prompt"`
	Messages  *json.RawMessage `json:"messages"`
	Stream    *bool            `json:"stream"`
	KeepAlive json.RawMessage  `json:"keep_alive"`
	Input     json.RawMessage  `json:"input"`
}

// empty reports a request with no prompt and no messages: a warm-up, or
// with keep_alive 0 an unload.
func (req *genRequest) empty() bool {
	return (req.Prompt == nil || *req.Prompt == "") && (req.Messages == nil || string(*req.Messages) == "[]" || string(*req.Messages) == "null")
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	req, name, keepAlive, ok := s.readGenerate(w, r)
	if !ok {
		return
	}
	empty := req.empty()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	if empty && keepAlive != nil && *keepAlive == 0 {
		s.unloads.Add(1)
		s.requestUnload(name)
		writeJSON(w, 200, map[string]any{"model": req.Model, "created_at": now, "response": "", "done": true, "done_reason": "unload"})
		return
	}
	done, err := s.admitRequest(r, name, keepAlive)
	if err != nil {
		writeLoadError(w, err, false) // or the client has gone
		return
	}
	defer done()
	if empty {
		s.warmups.Add(1)
		writeJSON(w, 200, map[string]any{"model": name, "created_at": now, "response": "", "done": true, "done_reason": "load"})
		return
	}
	s.requests.Add(1)
	s.inflight.Add(1)
	defer s.inflight.Add(-1)
	defer s.gpu.Mark("ollama", "done "+r.URL.Path+" "+name)
	c := genChunks{name: name, chat: strings.HasSuffix(r.URL.Path, "/chat"), tokens: s.opts.Tokens}
	if req.Stream != nil && !*req.Stream {
		s.generateTokens(r, nil)
		writeJSON(w, 200, c.chunk(strings.Repeat("tok ", s.opts.Tokens), true))
		return
	}
	s.streamNDJSON(w, r, c)
}

// readGenerate decodes and checks a generate or chat request, answering
// it with Ollama's error if it is bad. It returns the request, its
// model's normalised name and its keep_alive.
func (s *Server) readGenerate(w http.ResponseWriter, r *http.Request) (req genRequest, name string, keepAlive *time.Duration, ok bool) {
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]string{"error": "invalid request: " + err.Error()})
		return req, "", nil, false
	}
	keepAlive, err := parseKeepAlive(req.KeepAlive)
	if err != nil {
		writeJSON(w, 400, map[string]string{"error": err.Error()})
		return req, "", nil, false
	}
	name = ollama.NormalizeName(req.Model)
	if req.Model == "" {
		writeJSON(w, 400, map[string]string{"error": "model is required"})
		return req, "", nil, false
	}
	if !s.library[name] {
		writeJSON(w, 404, map[string]string{"error": fmt.Sprintf("model '%s' not found", req.Model)})
		return req, "", nil, false
	}
	return req, name, keepAlive, true
}

// genChunks builds the lines of a generate or chat answer.
type genChunks struct {
	name   string
	chat   bool // /api/chat: the token is a message's content
	tokens int
}

// chunk is one line, carrying tok; the last one says why and how much.
func (c genChunks) chunk(tok string, last bool) map[string]any {
	m := map[string]any{"model": c.name, "created_at": time.Now().UTC().Format(time.RFC3339Nano), "done": last}
	if c.chat {
		m["message"] = map[string]string{"role": "assistant", "content": tok}
	} else {
		m["response"] = tok
	}
	if last {
		m["done_reason"] = "stop"
		m["eval_count"] = c.tokens
	}
	return m
}

// streamNDJSON streams a generation a token a line, and a last line that
// is done unless streams are set to end undone.
func (s *Server) streamNDJSON(w http.ResponseWriter, r *http.Request, c genChunks) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(200)
	enc := json.NewEncoder(w)
	s.generateTokens(r, func(i int) {
		enc.Encode(c.chunk(fmt.Sprintf("tok%d ", i), false))
		http.NewResponseController(w).Flush()
	})
	if s.undone.Load() {
		enc.Encode(c.chunk("", false))
		return
	}
	enc.Encode(c.chunk("", true))
}

// generateTokens paces a generation, calling emit for each token.
// It ends early if the client goes away.
func (s *Server) generateTokens(r *http.Request, emit func(int)) {
	p := fakeserver.Pacer{Tokens: s.opts.Tokens, Delay: s.opts.TokenDelay, Gate: &s.chats}
	p.Run(func(ready <-chan struct{}) error {
		select {
		case <-ready:
			return nil
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}, func(i int) error {
		if emit != nil {
			emit(i)
		}
		return nil
	})
}
