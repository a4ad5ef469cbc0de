// Package llamaswap is the turnstile's client for llama-swap: it lists the
// running upstream processes, unloads them all and confirms they are gone.
// It relies on three facts of llama-swap (v250-5): POST /api/models/unload
// answers only after every process has exited; GET /running lists every
// process that is not stopped (starting, ready or stopping); and nothing
// stops a later request from loading a model again, so an empty list is
// true only until the next request. It never proxies user traffic, and it
// never probes /upstream/<model>/..., which loads the model.
package llamaswap

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// Client talks to one llama-swap server.
type Client struct {
	c jsonhttp.Client
}

// NewClient returns a client for the llama-swap server at baseURL
// (e.g. http://127.0.0.1:8080). hc may be nil.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	c, err := jsonhttp.New("llama-swap", baseURL, hc)
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

// Process is one entry of GET /running.
type Process struct {
	Model string `json:"model"`
	State string `json:"state"` // "starting", "ready" or "stopping"
	Name  string `json:"name"`  // the config's display name, often ""
	// Proxy is the URL of the model's server, which llama-swap forwards
	// to: on this host, its port is the server's listener.
	Proxy string `json:"proxy"`
}

// Running lists the processes that are not stopped, sorted by model.
func (c *Client) Running(ctx context.Context) ([]Process, error) {
	var out struct {
		Running []Process `json:"running"`
	}
	if err := c.do(ctx, http.MethodGet, "/running", &out); err != nil {
		return nil, err
	}
	return out.Running, nil
}

// UnloadAll stops every process (POST /api/models/unload). llama-swap
// answers once each has exited; the requests they were serving are cut.
func (c *Client) UnloadAll(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/api/models/unload", nil)
}

// Empty unloads every model and confirms it: Running, then UnloadAll if any
// runs, then Running must be empty; a process still listed is an error
// naming it. It returns the models that were running.
//
// A process listed after the unload is one that a request started after
// it (or a swap under way when it came, which llama-swap lets go on): the
// caller holds the requests, so it is a failure to report, not to retry.
func (c *Client) Empty(ctx context.Context) (unloaded []string, err error) {
	before, err := c.Running(ctx)
	if err != nil {
		return nil, fmt.Errorf("list running models: %w", err)
	}
	if len(before) == 0 {
		return nil, nil
	}
	for _, p := range before {
		unloaded = append(unloaded, p.Model)
	}
	if err := c.UnloadAll(ctx); err != nil {
		return unloaded, fmt.Errorf("unload %s: %w", strings.Join(unloaded, ", "), err)
	}
	after, err := c.Running(ctx)
	if err != nil {
		return unloaded, fmt.Errorf("list running models after the unload: %w", err)
	}
	if len(after) > 0 {
		left := make([]string, 0, len(after))
		for _, p := range after {
			left = append(left, p.Model+" ("+p.State+")")
		}
		return unloaded, fmt.Errorf("llama-swap still runs %s after unloading every model", strings.Join(left, ", "))
	}
	return unloaded, nil
}

// StatusError is a non-2xx answer from llama-swap. Its Message is the
// whole body: llama-swap's "error" is an object.
type StatusError = jsonhttp.StatusError

// Refused reports whether err means nothing listens at the server's
// address: llama-swap is not running. Its processes may still be.
func Refused(err error) bool { return jsonhttp.Refused(err) }

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	return c.c.Do(ctx, method, path, nil, out, 1<<20)
}
