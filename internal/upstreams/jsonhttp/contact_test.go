package jsonhttp

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A request that got no answer is a ContactError; one that got an answer,
// or that its caller gave up on, is not.
func TestUnreached(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	c, err := New("dead", dead, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Do(t.Context(), "GET", "/", nil, nil, 1<<10); !Unreached(err) || !Refused(err) {
		t.Fatalf("a closed port: %v, want unreached and refused", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.Do(ctx, "GET", "/", nil, nil, 1<<10); err == nil || Unreached(err) {
		t.Fatalf("a request its caller gave up on: %v, want an error that is no verdict", err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
	}))
	defer srv.Close()
	live, _ := New("live", srv.URL, nil)
	if err := live.Do(t.Context(), "GET", "/", nil, nil, 1<<10); err == nil || Unreached(err) {
		t.Fatalf("a 401: %v, want an answered error", err)
	}
}
