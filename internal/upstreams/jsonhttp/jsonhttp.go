// Package jsonhttp is the small JSON-over-HTTP client that the Ollama and
// ComfyUI clients share: one request, a bounded answer, a typed error for
// a non-2xx status, and a test for "nothing listens there".
package jsonhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
)

// Client calls one upstream server.
type Client struct {
	name string // for errors: "ollama", "comfyui"
	base string
	hc   *http.Client
}

// New returns a client for the server at baseURL (http(s)://host:port).
// hc may be nil.
func New(name, baseURL string, hc *http.Client) (Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return Client{}, fmt.Errorf("invalid %s URL %q: want http(s)://host:port", name, baseURL)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return Client{name: name, base: strings.TrimRight(baseURL, "/"), hc: hc}, nil
}

// URL returns the server's base URL.
func (c Client) URL() string { return c.base }

// StatusError is a non-2xx answer.
type StatusError struct {
	Upstream string
	Status   int
	Message  string // the answer's "error" string, or its body
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s answered %d: %s", e.Upstream, e.Status, e.Message)
}

// Do sends in as JSON (none if nil) and decodes the answer into out (if
// not nil and the answer is not empty), reading at most limit bytes.
func (c Client) Do(ctx context.Context, method, path string, in, out any, limit int64) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(data))
		}
		return &StatusError{Upstream: c.name, Status: resp.StatusCode, Message: e.Error}
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	// An answer that streams NDJSON despite asking for one object: the
	// first object is enough.
	return json.NewDecoder(bytes.NewReader(data)).Decode(out)
}

// Refused reports whether err means nothing listens at the server's
// address: its process is not running, so it holds no GPU memory.
func Refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}
