package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
)

// keepAliveEvery is how often an idle event stream gets a comment line,
// so that proxies and browsers keep it open (the contract says at least
// every 15 s).
const keepAliveEvery = 10 * time.Second

// retryMillis is how soon a browser reconnects a stream that ended: one
// dropped for falling behind, or ended by a config reload.
const retryMillis = 2000

// wantsEvents reports whether r asks for the live event stream.
func wantsEvents(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// serveEvents streams the turnstile's live events as Server-Sent Events:
// the status at once, then a status within 100 ms of each change, each
// timed step and each image job's end, until the client goes, its server
// shuts down or its config is unloaded (so that neither a reload nor
// Caddy's exit waits for a stream; a browser reconnects to the new
// config) or the client falls behind and is dropped.
func (s *StatusRoutes) serveEvents(w http.ResponseWriter, r *http.Request) error {
	return streamEvents(w, r, s.Turnstile, !s.Full, s.Done, s.Shutdown)
}

// streamEvents streams t's events to w until r's client goes, either of
// done and shutdown is closed (nil never is), or the client falls behind;
// with public, as the public view shows them (publicEvent).
func streamEvents(w http.ResponseWriter, r *http.Request, t Turnstile, public bool, done, shutdown <-chan struct{}) error {
	sub, err := t.Subscribe()
	if err != nil {
		// The page falls back to polling.
		w.Header().Set("Retry-After", "30")
		return writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "gpu_turnstile: " + err.Error()})
	}
	defer sub.Close()
	rc := http.NewResponseController(w)
	// A stream outlives the server's write timeout, if it has one.
	_ = rc.SetWriteDeadline(time.Time{})
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Accel-Buffering", "no") // nginx in front: do not buffer
	w.WriteHeader(http.StatusOK)

	first, err := firstStatus(t, public)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.WriteString("retry: " + strconv.Itoa(retryMillis) + "\n")
	writeEvent(&buf, gpu.Event{Name: "status", Data: first})
	keepAlive := time.NewTicker(keepAliveEvery)
	defer keepAlive.Stop()
	for {
		if _, err := w.Write(buf.Bytes()); err != nil {
			return nil // the client went away
		}
		if err := rc.Flush(); err != nil {
			return nil
		}
		buf.Reset()
		select {
		case ev, ok := <-sub.C:
			if !ok {
				if sub.Dropped() {
					w.Write([]byte(": dropped: this stream fell behind; reconnect\n\n"))
				}
				return nil
			}
			ev, shown, err := viewEvent(ev, t, public)
			if err != nil {
				return err
			}
			if !shown {
				continue
			}
			writeEvent(&buf, ev)
		case <-keepAlive.C:
			buf.WriteString(": keep-alive\n\n")
		case <-r.Context().Done():
			return nil
		case <-done:
			return nil
		case <-shutdown:
			return nil
		}
	}
}

// firstStatus is the stream's first status event's data, in its view.
func firstStatus(t Turnstile, public bool) ([]byte, error) {
	if public {
		return json.Marshal(Public(t.status()))
	}
	return json.Marshal(t.status())
}

// viewEvent is ev as the stream's view shows it; shown is false for an
// event the public view leaves out.
func viewEvent(ev gpu.Event, t Turnstile, public bool) (gpu.Event, bool, error) {
	if !public {
		return ev, true, nil
	}
	return publicEvent(ev, t)
}

// writeEvent appends ev in the event stream's format. Its data is JSON on
// one line.
func writeEvent(buf *bytes.Buffer, ev gpu.Event) {
	buf.WriteString("event: ")
	buf.WriteString(ev.Name)
	buf.WriteString("\ndata: ")
	buf.Write(ev.Data)
	buf.WriteString("\n\n")
}

// OnShutdown returns a channel closed when the HTTP server of ctx begins
// to shut down (a reload or Caddy's exit); nil, which never fires,
// outside a server. Caddy's server then waits for its connections
// (forever, by default) before it cancels the config's context, so a
// stream that waited for that context would keep Caddy from exiting.
func OnShutdown(ctx caddy.Context) <-chan struct{} {
	srv, ok := ctx.Value(caddyhttp.ServerCtxKey).(*caddyhttp.Server)
	if !ok || srv == nil {
		return nil
	}
	ch := make(chan struct{})
	var once sync.Once
	srv.RegisterOnShutdown(func() { once.Do(func() { close(ch) }) })
	return ch
}
