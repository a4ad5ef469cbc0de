// Package vllm is the turnstile's client for vLLM's sleep mode: it puts the
// engine to sleep and confirms it, wakes it and waits until it schedules
// again, and lists the served models. It relies on these facts of vLLM (v1
// engine): the sleep routes exist only with VLLM_SERVER_DEV_MODE=1 (404
// otherwise); POST /sleep reads level and mode from the query, not the
// body, and answers only once the engine sleeps, with an empty body (some
// builds send JSON: only the status counts); vLLM never wakes by itself,
// and requests sent while it sleeps are queued inside it, not refused. It
// never proxies user traffic.
package vllm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// Client talks to one vLLM server.
type Client struct {
	c jsonhttp.Client
}

// NewClient returns a client for the vLLM server at baseURL
// (e.g. http://127.0.0.1:8000). hc may be nil.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	c, err := jsonhttp.New("vllm", baseURL, hc)
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

// ErrNoSleepMode says the sleep routes answer 404: the server was started
// without VLLM_SERVER_DEV_MODE=1, so it cannot be put to sleep.
var ErrNoSleepMode = errors.New("vllm has no sleep routes (404): VLLM_SERVER_DEV_MODE=1 is not set")

// IsSleeping asks GET /is_sleeping: true while any memory sleeps or
// scheduling is paused.
func (c *Client) IsSleeping(ctx context.Context) (bool, error) {
	var out struct {
		IsSleeping *bool `json:"is_sleeping"`
	}
	if err := c.sleepRoute(ctx, http.MethodGet, "/is_sleeping", &out); err != nil {
		return false, err
	}
	if out.IsSleeping == nil {
		return false, errors.New("vllm /is_sleeping answered without is_sleeping")
	}
	return *out.IsSleeping, nil
}

// Sleep puts the engine to sleep: level 0 pauses scheduling only, 1
// offloads the weights to host RAM, 2 discards them; mode is abort, wait
// (let the requests in flight finish) or keep. vLLM answers once asleep.
func (c *Client) Sleep(ctx context.Context, level int, mode string) error {
	q := url.Values{"level": {strconv.Itoa(level)}, "mode": {mode}}
	return c.sleepRoute(ctx, http.MethodPost, "/sleep?"+q.Encode(), nil)
}

// WakeUp wakes every part of the engine (POST /wake_up without tags).
// vLLM answers once the memory is back.
func (c *Client) WakeUp(ctx context.Context) error {
	return c.sleepRoute(ctx, http.MethodPost, "/wake_up", nil)
}

// SleepAndConfirm sleeps at level 1, mode wait, and confirms /is_sleeping
// true.
func (c *Client) SleepAndConfirm(ctx context.Context) error {
	if err := c.Sleep(ctx, 1, "wait"); err != nil {
		return fmt.Errorf("sleep: %w", err)
	}
	asleep, err := c.IsSleeping(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("confirm sleep: %w", err)
	case !asleep:
		return errors.New("vllm answered /sleep, yet /is_sleeping says false (woken meanwhile by someone else?)")
	}
	return nil
}

// WakeAndConfirm wakes it and polls /is_sleeping (poll.New(pollMax)) until
// false, so that requests sent after it returns are scheduled at once.
func (c *Client) WakeAndConfirm(ctx context.Context, pollMax time.Duration) error {
	if err := c.WakeUp(ctx); err != nil {
		return fmt.Errorf("wake up: %w", err)
	}
	stillAsleep := func(err error) error { return fmt.Errorf("vllm still sleeps after /wake_up: %w", err) }
	pace := poll.New(pollMax)
	for polled := false; ; polled = true {
		asleep, err := c.IsSleeping(ctx)
		switch {
		case err != nil && polled && ctx.Err() != nil:
			return stillAsleep(ctx.Err()) // the deadline passed while polling
		case err != nil:
			return fmt.Errorf("confirm wake-up: %w", err)
		case !asleep:
			return nil
		}
		if err := pace.Wait(ctx); err != nil {
			return stillAsleep(err)
		}
	}
}

// Models lists the ids of the served models (GET /v1/models).
func (c *Client) Models(ctx context.Context) ([]string, error) {
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := c.c.Do(ctx, http.MethodGet, "/v1/models", nil, &out, 1<<20); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(out.Data))
	for _, m := range out.Data {
		ids = append(ids, m.ID)
	}
	return ids, nil
}

// StatusError is a non-2xx answer from vLLM.
type StatusError = jsonhttp.StatusError

// Refused reports whether err means nothing listens at the server's
// address: vLLM is not running. Its EngineCore process may still be.
func Refused(err error) bool { return jsonhttp.Refused(err) }

// sleepRoute calls one of the dev-mode routes; 404 means there are none.
func (c *Client) sleepRoute(ctx context.Context, method, path string, out any) error {
	err := c.c.Do(ctx, method, path, nil, out, 1<<20)
	var se *StatusError
	if errors.As(err, &se) && se.Status == http.StatusNotFound {
		return fmt.Errorf("%w: %s", ErrNoSleepMode, se.Message)
	}
	return err
}
