package httpapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/admit"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// ForwardFailed returns the error of a forward that failed before anything
// was sent: reverse_proxy's 502, 503 or 504 (the engine could not be
// reached or did not answer in time). ok is false for any other error.
//
// reverse_proxy returns an error only before it has written anything:
// once the engine's answer has begun, a failure aborts the handler with
// http.ErrAbortHandler instead. Caddy's own error handling relies on that
// too when it writes the error's status, so no writer is wrapped to find
// out, which keeps the fast path as it was.
func ForwardFailed(err error) (he caddyhttp.HandlerError, ok bool) {
	if !errors.As(err, &he) {
		return he, false
	}
	switch he.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return he, true
	}
	return he, false
}

// WriteEngineDown answers a request whose forward failed with he
// (ForwardFailed) in the error shape of its route (path, its clean path)
// or of its engine's kind, naming the engine (name, "" if not known); the
// address reverse_proxy tried goes to log. A request with a body is
// answered on a connection that then closes: how much of its body the
// failed forward read is unknown (a body cut by the server's read_body
// timeout fails the forward too), so the connection cannot carry another
// request.
func WriteEngineDown(w http.ResponseWriter, r *http.Request, path string, he caddyhttp.HandlerError, name, kind string, log *zap.Logger) {
	down := EngineDown(he.StatusCode == http.StatusGatewayTimeout, name, kind)
	if r.ContentLength != 0 {
		admit.CloseAfter(w, r)
	}
	log.Error("engine not reachable through reverse_proxy; answered the client in its API's shape",
		zap.String("engine", name), zap.String("upstream", Upstream(r)), zap.String("path", r.URL.Path),
		zap.Int("status", down.Status), zap.Error(he.Err))
	Write(w, ShapeOf(path, kind), down)
}

// Upstream is the upstream ("host:port") reverse_proxy dialled for r, or
// "".
func Upstream(r *http.Request) string {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return ""
	}
	s, _ := repl.GetString("http.reverse_proxy.upstream.hostport")
	return s
}

// EngineOf is the engine a request went to: image (its job's own) if not
// nil, else the one reverse_proxy dialled, else the one its route belongs
// to; llm is set for an LLM request.
func EngineOf(r *http.Request, c *gpu.Config, image gpu.Engine, llm bool) gpu.Engine {
	if image != nil {
		return image
	}
	p := route.CleanPath(r)
	return c.EngineFor(Upstream(r), RouteKind(p), llm || strings.HasPrefix(p, "/v1/"))
}

// AnswerEngineDown answers a request whose forward failed with err before
// anything was sent (ForwardFailed) in its route's error shape, naming
// the engine it went to (engine, nil if not known); an engine that could
// not be reached is told to unreachable (gpu.GPU.NoteUnreachable) at
// once, so that it counts as unreachable (gpu.Ready). Any other error is
// returned as it is.
func AnswerEngineDown(w http.ResponseWriter, r *http.Request, err error, engine func() gpu.Engine, unreachable func(name string, err error), log *zap.Logger) error {
	he, ok := ForwardFailed(err)
	if !ok {
		return err
	}
	var name, kind string
	if e := engine(); e != nil {
		name, kind = e.Name(), e.Kind()
		if he.StatusCode != http.StatusGatewayTimeout {
			unreachable(name, he.Err)
		}
	}
	WriteEngineDown(w, r, route.CleanPath(r), he, name, kind, log)
	return nil
}
