// Package fakeserver holds what the engine fakes (ollamatest, llamacpptest,
// llamaswaptest, vllmtest, comfytest, a1111test) share and that is not
// about any engine's API: the HTTP server and its life, a gate that holds
// work until a test releases it, paced token generation, JSON answers and
// server-sent events, and options' defaults. What a fake answers, and when,
// stays the fake's own: each is as unkind as the engine it stands for.
package fakeserver

import (
	"context"
	"net/http"
	"net/http/httptest"
)

// Server is a fake's HTTP side: an httptest.Server on a loopback port, and
// the fake's life, which ends when the fake stops and ends its waits.
type Server struct {
	srv    *httptest.Server
	ctx    context.Context
	cancel context.CancelFunc
}

// Start serves h on a loopback port.
func Start(h http.Handler) *Server {
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{srv: httptest.NewServer(h), ctx: ctx, cancel: cancel}
}

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL }

// Context ends when the fake stops.
func (s *Server) Context() context.Context { return s.ctx }

// Done is closed when the fake stops.
func (s *Server) Done() <-chan struct{} { return s.ctx.Done() }

// Stop ends the fake's life (Context, Done); the server still answers.
func (s *Server) Stop() { s.cancel() }

// Close stops the fake and shuts the server down once the requests in
// flight have been answered.
func (s *Server) Close() {
	s.Stop()
	s.srv.Close()
}

// Cut stops the fake, cuts the connections of the requests in flight (their
// clients see the connection end) and shuts the server down.
func (s *Server) Cut() {
	s.Stop()
	s.srv.CloseClientConnections()
	s.srv.Close()
}

// Refuse is the process dying under the server: its port refuses
// connections from now on and the requests in flight are cut. The fake's
// life is its caller's to end.
func (s *Server) Refuse() {
	s.srv.Listener.Close()
	s.srv.CloseClientConnections()
}
