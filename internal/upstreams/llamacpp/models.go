package llamacpp

import (
	"context"
	"fmt"
	"net/http"
)

// The values of a router model's status.value.
const (
	Unloaded    = "unloaded"
	Loading     = "loading"
	Loaded      = "loaded"
	Sleeping    = "sleeping" // the child lives, its model freed (--sleep-idle-seconds)
	Downloading = "downloading"
	Downloaded  = "downloaded"
)

// Model is one entry of GET /models (router mode).
type Model struct {
	ID     string
	Status string // status.value; "" from a single-model server, whose entries have none
	// Failed is status.failed: the child exited non-zero (a failed load,
	// or killed while loading or after its stop timeout). Status is then
	// Unloaded: the process is gone.
	Failed   bool
	ExitCode int // status.exit_code, set when Failed
}

// Models lists the server's models (GET /models).
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	var out struct {
		Data []struct {
			ID     string `json:"id"`
			Status struct {
				Value    string `json:"value"`
				Failed   bool   `json:"failed"`
				ExitCode int    `json:"exit_code"`
			} `json:"status"`
		} `json:"data"`
	}
	if err := c.do(ctx, http.MethodGet, "/models", nil, &out); err != nil {
		return nil, err
	}
	models := make([]Model, 0, len(out.Data))
	for _, d := range out.Data {
		models = append(models, Model{ID: d.ID, Status: d.Status.Value, Failed: d.Status.Failed, ExitCode: d.Status.ExitCode})
	}
	return models, nil
}

// Running returns the ids whose status is loaded, loading or sleeping:
// those with a child process, which an unload must end.
func Running(models []Model) []string {
	var ids []string
	for _, m := range models {
		if running(m.Status) {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// running reports whether a model may hold or come to hold GPU memory:
// every status but unloaded and downloaded (a model downloading can be
// unloaded, and would load once its download ends; a status this client
// does not know counts as running). An entry with no status is not the
// router's (a single-model server lists its model so).
func running(status string) bool {
	return status != "" && status != Unloaded && status != Downloaded
}

// Load asks the router to load a model (POST /models/load). The router
// answers once the child is spawned, while the model is still loading;
// poll Models for Loaded. If the router is at --models-max it first
// unloads the least recently used model and waits for its exit. A model
// already loaded, loading or sleeping is not an error. On a single-model
// server the error wraps ErrSingleModel.
func (c *Client) Load(ctx context.Context, model string) error {
	err := c.do(ctx, http.MethodPost, "/models/load", map[string]string{"model": model}, nil)
	switch {
	case answered(err, http.StatusBadRequest, msgAlreadyRunning):
		return nil
	case answered(err, http.StatusNotFound, msgFileNotFound):
		return fmt.Errorf("load %s: %w", model, ErrSingleModel)
	}
	return err
}

// Unload asks the router to unload a model (POST /models/unload). The
// router answers at once; the child exits later (a loading one is killed
// at once), and only then does the model's status turn Unloaded. A model
// that is not running gives an error wrapping ErrNotRunning; on a
// single-model server the error wraps ErrSingleModel.
func (c *Client) Unload(ctx context.Context, model string) error {
	err := c.do(ctx, http.MethodPost, "/models/unload", map[string]string{"model": model}, nil)
	switch {
	case answered(err, http.StatusBadRequest, msgNotRunning):
		return fmt.Errorf("unload %s: %w", model, ErrNotRunning)
	case answered(err, http.StatusNotFound, msgFileNotFound):
		return fmt.Errorf("unload %s: %w", model, ErrSingleModel)
	}
	return err
}
