package comfy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// The client's headers go with the websocket's handshake too.
func TestWatcherSendsTheHeader(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			select {
			case got <- r.Header.Get("Authorization"):
			default:
			}
		}
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer srv.Close()
	c, err := NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetHeader(http.Header{"Authorization": {"Bearer k"}})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go c.NewWatcher("id", time.Millisecond, 10*time.Millisecond, func(bool, error) {}).Run(ctx)
	if h := <-got; h != "Bearer k" {
		t.Fatalf("the handshake's Authorization: %q", h)
	}
}
