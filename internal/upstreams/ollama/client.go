// Package ollama is the turnstile's client for Ollama: it lists the loaded
// models, unloads them and confirms they are gone, and warms a model. It
// never proxies user traffic; Caddy's reverse_proxy does.
package ollama

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// Client talks to one Ollama server.
type Client struct {
	c jsonhttp.Client
}

// NewClient returns a client for the Ollama server at baseURL
// (e.g. http://127.0.0.1:11435). hc may be nil.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	c, err := jsonhttp.New("ollama", baseURL, hc)
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

// RunningModel is one entry of /api/ps.
type RunningModel struct {
	Name      string    `json:"name"`
	Model     string    `json:"model"`
	Size      int64     `json:"size"`
	SizeVRAM  int64     `json:"size_vram"`
	ExpiresAt time.Time `json:"expires_at"`
}

// displayName is the model's name as /api/ps gives it (its model field
// where the name is missing).
func (m RunningModel) displayName() string {
	if m.Name == "" {
		return m.Model
	}
	return m.Name
}

// PS lists the models Ollama has loaded.
func (c *Client) PS(ctx context.Context) ([]RunningModel, error) {
	var out struct {
		Models []RunningModel `json:"models"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/ps", nil, &out); err != nil {
		return nil, err
	}
	return out.Models, nil
}

// Unload asks Ollama to unload a model (keep_alive 0). Ollama answers at
// once and unloads asynchronously, after the model's running requests; the
// model leaves /api/ps when its runner has exited. A model Ollama does not
// know is not loaded, so that is not an error.
func (c *Client) Unload(ctx context.Context, model string) error {
	err := c.do(ctx, http.MethodPost, "/api/generate", map[string]any{"model": model, "keep_alive": 0}, nil)
	var se *StatusError
	if errors.As(err, &se) && se.Status == http.StatusNotFound {
		return nil
	}
	return err
}

// Warm loads a model and returns once it is loaded. keepAlive is passed as
// Ollama's keep_alive ("" leaves the server default).
func (c *Client) Warm(ctx context.Context, model, keepAlive string) error {
	body := map[string]any{"model": model}
	if keepAlive != "" {
		body["keep_alive"] = keepAlive
	}
	return c.do(ctx, http.MethodPost, "/api/generate", body, nil)
}

// UnloadAll unloads every loaded model and polls /api/ps until it lists
// none, or ctx ends. It polls fast at first (most unloads take well under
// a second) and backs off to maxInterval (see package poll). A model that
// appears while it polls (one that was loading, or loaded by someone who
// bypassed the turnstile) is unloaded too, and so is one whose unload did
// not take. It returns the names it asked to unload.
//
// An empty list proves nothing about a load in flight: a loading model is
// not listed. See LocalRunners.
func (c *Client) UnloadAll(ctx context.Context, maxInterval time.Duration) ([]string, error) {
	names, _, err := c.UnloadAllBut(ctx, maxInterval, nil)
	return names, err
}

// UnloadAllBut is UnloadAll, but leaves loaded the models keep reports
// true for (by name; nil keeps none): it ends once /api/ps lists only
// those, and returns them as kept.
func (c *Client) UnloadAllBut(ctx context.Context, maxInterval time.Duration, keep func(name string) bool) (names, kept []string, err error) {
	asked := map[string]bool{}
	var models []RunningModel
	stillListed := func(err error) error {
		left := make([]string, 0, len(models))
		for _, m := range models {
			left = append(left, m.displayName())
		}
		return fmt.Errorf("ollama still lists %s: %w", strings.Join(left, ", "), err)
	}
	pace := poll.New(maxInterval)
	for {
		listed, err := c.PS(ctx)
		switch {
		case err != nil && ctx.Err() != nil && len(models) > 0:
			return names, nil, stillListed(ctx.Err()) // the deadline passed while polling
		case err != nil:
			return names, nil, fmt.Errorf("list loaded models: %w", err)
		}
		// A model to keep whose unload is pending (early_unload, or its
		// keep_alive running out) is not kept: it is waited out as one
		// asked to unload.
		now := time.Now()
		kept, models = kept[:0], listed[:0]
		for _, m := range listed {
			if keep != nil && keep(m.displayName()) && m.ExpiresAt.After(now) {
				kept = append(kept, m.displayName())
			} else {
				models = append(models, m)
			}
		}
		if len(models) == 0 {
			return names, kept, nil
		}
		for _, m := range models {
			name := m.displayName()
			// A model with a pending unload is listed as expiring at the
			// unload's time. One still expiring in the future was not
			// unloaded: it was loading when asked (Ollama ignores the
			// unload then), or a request with its own keep_alive
			// cancelled the unload. Ask again.
			if asked[name] && !m.ExpiresAt.After(now) {
				continue
			}
			if !asked[name] {
				asked[name] = true
				names = append(names, name)
			}
			if err := c.Unload(ctx, name); err != nil {
				return names, nil, fmt.Errorf("unload %s: %w", name, err)
			}
		}
		if err := pace.Wait(ctx); err != nil {
			return names, nil, stillListed(err)
		}
	}
}

// StatusError is a non-2xx answer from Ollama.
type StatusError = jsonhttp.StatusError

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	return c.c.Do(ctx, method, path, in, out, 4<<20)
}
