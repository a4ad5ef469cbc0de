package llamacpp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// reaskAfter is how long UnloadAll waits on a model it asked to unload
// before asking again. A second ask is harmless to a child that is
// exiting, and it catches one that exited and was loaded again (by a
// request that bypassed the turnstile) between two polls, which the
// listing alone cannot tell from one still exiting.
const reaskAfter = time.Second

// UnloadAll unloads every model that may run (see Running: loaded,
// loading, sleeping, downloading; there is no unload-all route), then polls GET /models (paced by
// poll.New(pollMax)) until all of them are unloaded: the answer to an
// unload is immediate, the child exits later, and the status turns
// unloaded only once it has. It returns the models it unloaded. If ctx
// ends first, the error names the models still not unloaded and their
// states. A model that turns unloaded with failed:true counts as unloaded
// (its process is gone); a model that starts while it polls is unloaded
// too.
//
// On a single-model server, which has no unload route, the error wraps
// ErrSingleModel (and ErrLoading while it loads its model).
func (c *Client) UnloadAll(ctx context.Context, pollMax time.Duration) (unloaded []string, err error) {
	router, err := c.Router(ctx)
	switch {
	case errors.Is(err, ErrLoading):
		return nil, fmt.Errorf("%w (%w)", ErrSingleModel, err)
	case err != nil:
		return nil, fmt.Errorf("read props: %w", err)
	case !router:
		return nil, ErrSingleModel
	}
	asked := map[string]time.Time{} // unload asked, model not yet seen unloaded
	var models []Model
	pace := poll.New(pollMax)
	for {
		listed, err := c.Models(ctx)
		switch {
		case err != nil && ctx.Err() != nil && models != nil:
			return unloaded, stillRunning(models, ctx.Err()) // the deadline passed while polling
		case err != nil:
			return unloaded, fmt.Errorf("list models: %w", err)
		}
		models = listed
		left := false
		for _, m := range models {
			if !running(m.Status) {
				delete(asked, m.ID)
				continue
			}
			left = true
			if at, ok := asked[m.ID]; ok && time.Since(at) < reaskAfter {
				continue // its child is exiting
			}
			if err := c.Unload(ctx, m.ID); err != nil && !errors.Is(err, ErrNotRunning) {
				if ctx.Err() != nil {
					return unloaded, stillRunning(models, ctx.Err())
				}
				return unloaded, fmt.Errorf("unload %s: %w", m.ID, err)
			}
			asked[m.ID] = time.Now()
			if !slices.Contains(unloaded, m.ID) {
				unloaded = append(unloaded, m.ID)
			}
		}
		if !left {
			return unloaded, nil
		}
		if err := pace.Wait(ctx); err != nil {
			return unloaded, stillRunning(models, err)
		}
	}
}

// stillRunning names the models of the last listing that were not
// unloaded, with their states.
func stillRunning(models []Model, err error) error {
	var left []string
	for _, m := range models {
		if running(m.Status) {
			left = append(left, fmt.Sprintf("%s (%s)", m.ID, m.Status))
		}
	}
	return fmt.Errorf("llama.cpp still runs %s: %w", strings.Join(left, ", "), err)
}
