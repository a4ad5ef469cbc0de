package llamacpptest

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/fakeserver"
)

// task is what a model's process does for one route.
type task struct {
	name     string // on the timeline: "chat M served"
	counted  bool   // a model route (Requests)
	generate bool   // produces paced tokens; HoldChats holds it
	answer   func(x *exchange) (complete bool)
}

var (
	taskChat          = &task{"chat", true, true, answerChat}
	taskCompletion    = &task{"completion", true, true, answerNativeCompletion}
	taskOAICompletion = &task{"completion", true, true, answerOAICompletion}
	taskResponses     = &task{"responses", true, true, answerResponses}
	taskEmbedding     = &task{"embedding", true, false, answerNativeEmbedding}
	taskOAIEmbedding  = &task{"embedding", true, false, answerOAIEmbedding}
	taskRerank        = &task{"rerank", true, false, answerRerank}
	taskTokenize      = &task{"tokenize", true, false, answerTokenize}
	taskDetokenize    = &task{"detokenize", true, false, answerDetokenize}
	taskApplyTemplate = &task{"apply-template", true, false, answerApplyTemplate}
	taskSlots         = &task{"slots", false, false, answerSlots}
	taskMetrics       = &task{"metrics", false, false, answerMetrics}
	taskLora          = &task{"lora-adapters", false, false, answerLora}
	taskProps         = &task{"props", false, false, answerChildProps}
)

// modelRoutes are the POST routes that need a model: routed by "model" on
// a router, served by the one model of a single-model server.
var modelRoutes = map[string]*task{
	"/completion":          taskCompletion,
	"/completions":         taskCompletion,
	"/v1/completions":      taskOAICompletion,
	"/chat/completions":    taskChat,
	"/v1/chat/completions": taskChat,
	"/responses":           taskResponses,
	"/v1/responses":        taskResponses,
	"/infill":              taskCompletion,
	"/embedding":           taskEmbedding,
	"/embeddings":          taskEmbedding,
	"/v1/embeddings":       taskOAIEmbedding,
	"/rerank":              taskRerank,
	"/reranking":           taskRerank,
	"/v1/rerank":           taskRerank,
	"/v1/reranking":        taskRerank,
	"/tokenize":            taskTokenize,
	"/detokenize":          taskDetokenize,
	"/apply-template":      taskApplyTemplate,
}

// exchange is one request that a model's process handles.
type exchange struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	c      *child
	model  string
	body   map[string]any
	stream bool
	sent   bool // the status and headers are out
}

// serve runs a task on a model's process: it waits while a sleeping
// model reloads, and then answers.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, c *child, t *task, body map[string]any) {
	s.mu.Lock()
	select {
	case <-c.stopping:
		s.mu.Unlock()
		if s.single != nil {
			panic(http.ErrAbortHandler) // the process is going
		}
		// Told to exit, the child takes no more requests (when exactly
		// its listener closes is UNVERIFIED).
		writeProxyError(w, "Could not establish connection")
		return
	default:
	}
	if c.m.status == statusLoading {
		s.mu.Unlock()
		writeLoading(w, r) // forwarded without autoload: the child's own middleware answers
		return
	}
	woken := s.beginTaskLocked(c)
	s.mu.Unlock()
	defer s.endTask(c)
	x := &exchange{s: s, w: w, r: r, c: c, model: c.m.id, body: body}
	x.stream, _ = body["stream"].(bool)
	if woken != nil && !await(x, woken) {
		x.cut()
		return
	}
	if t.counted {
		s.requests.Add(1)
	}
	s.gpu.Mark(service, "request "+r.URL.Path+" "+x.model)
	if t.answer(x) {
		s.gpu.Mark(service, t.name+" "+x.model+" served")
	}
}

// await waits for ch, and reports false if the process stops first or the
// client goes away.
func await(x *exchange, ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-x.c.stopping:
	case <-x.r.Context().Done():
	}
	return false
}

// errStopped ends a generation whose process stops or whose client has
// gone.
var errStopped = errors.New("generation stopped")

// generate produces the tokens, calling emit (if not nil) for each. The
// first token waits while HoldChats holds generations. It reports false
// if the process was told to exit (its task loop stops) or the client
// went away.
func (x *exchange) generate(emit func(i int)) bool {
	p := fakeserver.Pacer{Tokens: x.s.opts.Tokens, Delay: x.s.opts.TokenDelay, Gate: &x.s.chats}
	return p.Run(func(ready <-chan struct{}) error {
		if !await(x, ready) {
			return errStopped
		}
		return nil
	}, func(i int) error {
		if emit != nil {
			emit(i)
		}
		return nil
	}) == nil
}

// cut ends an answer the process did not finish: the connection ends when
// the process does. A router relaying a stream then ends it as if it were
// complete; one that had no headers yet answers with a proxy error.
func (x *exchange) cut() {
	select {
	case <-x.c.exited:
	case <-x.r.Context().Done():
		return
	}
	x.s.gpu.Mark(service, "cut "+x.r.URL.Path+" "+x.model)
	x.s.mu.Lock()
	closed := x.s.closed
	x.s.mu.Unlock()
	if x.s.single != nil || closed {
		panic(http.ErrAbortHandler)
	}
	if !x.sent {
		writeProxyError(x.w, "Failed to read connection")
	}
}

// startStream sends the headers of a server-sent event stream.
func (x *exchange) startStream() {
	fakeserver.StartEvents(x.w, "text/event-stream")
	x.sent = true
}

// event sends one server-sent event: "data: {...}\n\n", after an
// "event: " line if name is not empty.
func (x *exchange) event(name string, v any) { fakeserver.Event(x.w, name, v) }

// done ends an OpenAI-compatible stream, flushed at once.
func (x *exchange) done() {
	fakeserver.EventsDone(x.w)
	http.NewResponseController(x.w).Flush()
}

func token(i int) string { return fmt.Sprintf("tok%d ", i) }
