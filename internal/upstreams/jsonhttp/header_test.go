package jsonhttp

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// WithHeader's headers go with every request, a Host header as the
// request's host, and changing the map given later changes nothing.
func TestWithHeader(t *testing.T) {
	got := make(chan *http.Request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
	}))
	defer srv.Close()
	c, err := New("t", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"authorization": {"Bearer k1"}, "X-Api-Key": {"k2"}, "Host": {"engine.local"}}
	c = c.WithHeader(h)
	h.Set("X-Api-Key", "changed")
	if err := c.Do(t.Context(), "POST", "/x", map[string]int{"a": 1}, nil, 1<<10); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Header.Get("Authorization") != "Bearer k1" || r.Header.Get("X-Api-Key") != "k2" ||
		r.Host != "engine.local" || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("headers %v host %q: want the client's headers", r.Header, r.Host)
	}
	if c.Header().Get("Authorization") != "Bearer k1" {
		t.Fatalf("Header() = %v", c.Header())
	}
}
