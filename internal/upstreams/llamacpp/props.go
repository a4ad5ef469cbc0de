package llamacpp

import (
	"context"
	"fmt"
	"net/http"
)

// Props is what the turnstile reads of GET /props.
type Props struct {
	Role       string // "router" in router mode; empty on a single-model server
	IsSleeping bool   // a single-model server has freed its model (--sleep-idle-seconds)
}

// Props reads GET /props without a model, which never wakes a sleeping
// server nor loads a model. (With ?model= a router forwards it to that
// model's child, loading the model: this client never sends that.)
func (c *Client) Props(ctx context.Context) (Props, error) {
	var out struct {
		Role       string `json:"role"`
		IsSleeping bool   `json:"is_sleeping"`
	}
	if err := c.do(ctx, http.MethodGet, "/props", nil, &out); err != nil {
		return Props{}, err
	}
	return Props{Role: out.Role, IsSleeping: out.IsSleeping}, nil
}

// Router reports whether the server runs in router mode (several models,
// unloadable over HTTP). A single-model server (-m) cannot be emptied over
// HTTP; Router then returns false, nil. A single-model server still
// loading its model answers 503 "Loading model" (a router never does, as
// it has no model of its own): Router then returns false and an error
// wrapping ErrLoading and the *StatusError.
func (c *Client) Router(ctx context.Context) (bool, error) {
	p, err := c.Props(ctx)
	if answered(err, http.StatusServiceUnavailable, msgLoadingModel) {
		return false, fmt.Errorf("%w: %w", ErrLoading, err)
	}
	if err != nil {
		return false, err
	}
	return p.Role == "router", nil
}
