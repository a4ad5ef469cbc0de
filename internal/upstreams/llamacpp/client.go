// Package llamacpp is the turnstile's client for llama.cpp's llama-server:
// it tells a router (several models, one child process each, unloadable
// over HTTP) from a single-model server (-m, which cannot be emptied over
// HTTP), lists the router's models and their states, loads and unloads
// them, and unloads them all and confirms that every child has exited. It
// never proxies user traffic; Caddy's reverse_proxy does.
//
// The facts it keeps (engines-api.md, section 1): an unload is answered at
// once and the child exits later, so only GET /models turning "unloaded"
// proves the memory free; there is no unload-all route; a model killed
// while loading turns "unloaded" with failed:true; GET /props never wakes
// or loads anything; and a single-model server answers every route with
// 503 "Loading model" until its model has loaded.
package llamacpp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// Client talks to one llama-server.
type Client struct {
	c jsonhttp.Client
}

// NewClient returns a client for the llama-server at baseURL
// (e.g. http://127.0.0.1:8080). hc may be nil.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	c, err := jsonhttp.New("llama.cpp", baseURL, hc)
	if err != nil {
		return nil, err
	}
	return &Client{c: c}, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.c.URL() }

// SetHeader makes the client send h with every request (the engine's
// credentials), before it is first used.
func (c *Client) SetHeader(h http.Header) { c.c = c.c.WithHeader(h) }

// StatusError is a non-2xx answer from llama-server. Its Message is the
// "message" of llama.cpp's {"error":{"code","message","type"}} envelope
// when the body is one (the type follows from the status), else the body.
type StatusError = jsonhttp.StatusError

var (
	// ErrNotRunning is Unload's answer for a model that is not loaded,
	// loading or sleeping: there is nothing to unload.
	ErrNotRunning = errors.New("model is not running")
	// ErrSingleModel means the server runs one model (-m/-hf) and has no
	// route to load or unload it: only ending the process, or its
	// --sleep-idle-seconds, frees the memory.
	ErrSingleModel = errors.New("llama-server runs a single model: it cannot be unloaded over HTTP")
	// ErrLoading means a single-model server is still loading its model:
	// until then it answers every route with 503 "Loading model".
	ErrLoading = errors.New("llama-server is loading its model")
)

// Messages of llama.cpp's error envelope that the client tells apart.
const (
	msgNotRunning     = "model is not running"
	msgAlreadyRunning = "model is already running"
	msgFileNotFound   = "File Not Found" // no such route: a single-model server
	msgLoadingModel   = "Loading model"
)

// errorEnvelope is llama.cpp's error body (format_error_response).
type errorEnvelope struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	err := c.c.Do(ctx, method, path, in, out, 4<<20)
	var se *StatusError
	if !errors.As(err, &se) {
		return err
	}
	var env errorEnvelope
	if json.Unmarshal([]byte(se.Message), &env) == nil && env.Error.Message != "" {
		return &StatusError{Upstream: se.Upstream, Status: se.Status, Message: env.Error.Message}
	}
	return err
}

// answered reports whether err is the status with the message.
func answered(err error, status int, message string) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == status && se.Message == message
}
