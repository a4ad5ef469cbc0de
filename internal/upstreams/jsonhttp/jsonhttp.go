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
	// header is sent with every request (an engine's credentials); its
	// values are never put in an error.
	header http.Header
}

// New returns a client for the server at baseURL (http(s)://host:port).
// hc may be nil.
func New(name, baseURL string, hc *http.Client) (Client, error) {
	if err := CheckURL(baseURL); err != nil {
		return Client{}, fmt.Errorf("invalid %s URL %q: %v", name, baseURL, err)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return Client{name: name, base: strings.TrimRight(baseURL, "/"), hc: hc}, nil
}

// CheckURL reports what is wrong with an engine's base URL: it must be
// http or https with a host, and carry no query or fragment (the client
// appends API paths to it, so they would end up in the middle of every
// request's URL). Userinfo must have a password: a user name alone is
// most often a typo for a host ("http://host@port").
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("want http(s)://host:port")
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("scheme %q: want http or https (e.g. http://127.0.0.1:11435)", u.Scheme)
	case u.Host == "" || u.Opaque != "":
		return errors.New("no host: want http(s)://host:port")
	case u.RawQuery != "" || u.ForceQuery:
		return errors.New("has a query (?...): give the engine's base URL only")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return errors.New("has a fragment (#...): give the engine's base URL only")
	case u.User != nil:
		if _, ok := u.User.Password(); !ok {
			return errors.New("has a user name but no password: write user:password@host, or leave both out")
		}
	}
	return nil
}

// URL returns the server's base URL.
func (c Client) URL() string { return c.base }

// WithHeader returns c sending h with every request as well, on top of
// the headers a request sets itself (an engine's API key, for one). h is
// copied, its names made canonical; a Host header names the host the
// requests are sent as.
func (c Client) WithHeader(h http.Header) Client {
	c.header = nil
	for k, vs := range h {
		for _, v := range vs {
			if c.header == nil {
				c.header = http.Header{}
			}
			c.header.Add(k, v)
		}
	}
	return c
}

// Header is a copy of the headers c sends with every request, nil if
// none: for a connection it makes itself (a websocket's handshake).
func (c Client) Header() http.Header { return c.header.Clone() }

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
	for k, v := range c.header {
		if k == "Host" {
			req.Host = v[0]
			continue
		}
		req.Header[k] = v
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return err // the caller gave up: no verdict on the server
		}
		return &ContactError{Upstream: c.name, Err: err}
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

// ContactError is a request that got no answer: the connection was
// refused, reset or timed out before a status line came. Any other error
// of Do comes with an answer, so the server was reached.
type ContactError struct {
	Upstream string
	Err      error
}

func (e *ContactError) Error() string { return e.Err.Error() }
func (e *ContactError) Unwrap() error { return e.Err }

// Unreached reports whether err is a request that got no answer
// (ContactError): the server was not reached.
func Unreached(err error) bool {
	var ce *ContactError
	return errors.As(err, &ce)
}

// Refused reports whether err means nothing listens at the server's
// address: its process is not running, so it holds no GPU memory.
func Refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED)
}
