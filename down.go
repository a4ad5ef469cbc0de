package turnstile

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

// sentWriter passes a response through and notes whether any of it has
// gone out, so that a failed forward is answered only while the client
// has been told nothing. Pooled: the fast path allocates nothing.
type sentWriter struct {
	caddyhttp.ResponseWriterWrapper
	sent bool
}

var sentWriters = sync.Pool{New: func() any { return new(sentWriter) }}

func acquireSentWriter(w http.ResponseWriter) *sentWriter {
	sw := sentWriters.Get().(*sentWriter)
	sw.ResponseWriter, sw.sent = w, false
	return sw
}

// release returns sw to the pool and reports whether anything was sent.
func (sw *sentWriter) release() bool {
	sent := sw.sent
	sw.ResponseWriter = nil
	sentWriters.Put(sw)
	return sent
}

func (sw *sentWriter) WriteHeader(status int) {
	if status >= 200 || status == http.StatusSwitchingProtocols {
		sw.sent = true
	}
	sw.ResponseWriterWrapper.WriteHeader(status)
}

func (sw *sentWriter) Write(p []byte) (int, error) {
	sw.sent = true
	return sw.ResponseWriterWrapper.Write(p)
}

func (sw *sentWriter) ReadFrom(r io.Reader) (int64, error) {
	sw.sent = true
	return sw.ResponseWriterWrapper.ReadFrom(r)
}

// FlushError keeps http.ResponseController's flush, which sends the
// headers, from going around the writer; Flush is the same for handlers
// that look for an http.Flusher.
func (sw *sentWriter) FlushError() error {
	sw.sent = true
	return http.NewResponseController(sw.ResponseWriter).Flush()
}

func (sw *sentWriter) Flush() { sw.FlushError() }

// answerFailedForward answers a request whose forward failed before
// anything was sent (reverse_proxy's 502, 503 or 504: the engine could not
// be reached or did not answer in time) in its route's error shape,
// naming the engine; the address goes to the log. An engine that could
// not be reached counts as unreachable at once (gpu.Ready). Any other
// outcome is returned as it is.
func (h *Handler) answerFailedForward(w http.ResponseWriter, r *http.Request, c class, sent bool, err error) error {
	if err == nil || sent {
		return err
	}
	return h.answerEngineDown(w, r, c, err)
}

// answerEngineDown is answerFailedForward's for an error, apart so that
// the path without one allocates nothing.
func (h *Handler) answerEngineDown(w http.ResponseWriter, r *http.Request, c class, err error) error {
	var he caddyhttp.HandlerError
	if !errors.As(err, &he) ||
		(he.StatusCode != http.StatusBadGateway && he.StatusCode != http.StatusServiceUnavailable && he.StatusCode != http.StatusGatewayTimeout) {
		return err
	}
	e := h.engineOf(r, c)
	var name, kind string
	if e != nil {
		name, kind = e.Name(), e.Kind()
	}
	timeout := he.StatusCode == http.StatusGatewayTimeout
	if e != nil && !timeout {
		h.ts.NoteUnreachable(name, he.Err)
	}
	down := httpapi.EngineDown(timeout, name, kind)
	h.ts.log().Error("engine not reachable through reverse_proxy; answered the client in its API's shape",
		zap.String("engine", name), zap.String("upstream", upstreamHostport(r)), zap.String("path", r.URL.Path),
		zap.Int("status", down.Status), zap.Error(he.Err))
	httpapi.Write(w, httpapi.ShapeOf(cleanPath(r), kind), down)
	return nil
}

// engineOf is the engine a request of class c went to: an image job's
// own, else the one reverse_proxy dialled, else the one its route
// belongs to.
func (h *Handler) engineOf(r *http.Request, c class) gpu.Engine {
	cfg := h.ts.cfg()
	if cfg == nil {
		return nil
	}
	if c == classImage {
		if e := h.imageEngine(cfg, r); e != nil {
			return e
		}
	}
	p := cleanPath(r)
	return cfg.gpu.EngineFor(upstreamHostport(r), httpapi.RouteKind(p), c == classLLM || strings.HasPrefix(p, "/v1/"))
}

// upstreamHostport is the upstream reverse_proxy dialled for r, or "".
func upstreamHostport(r *http.Request) string {
	repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if !ok {
		return ""
	}
	s, _ := repl.GetString("http.reverse_proxy.upstream.hostport")
	return s
}

// Interface guards
var (
	_ http.ResponseWriter = (*sentWriter)(nil)
	_ http.Flusher        = (*sentWriter)(nil)
	_ io.ReaderFrom       = (*sentWriter)(nil)
)
