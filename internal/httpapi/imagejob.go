package httpapi

import (
	"errors"
	"net/http"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/gpu"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// ImageRefusal is the answer to an image job that gpu.RunImage refused
// before it reached its engine e: no engine of that name after a reload,
// cancelled before it was sent, or the job could not be readied (down:
// the engine did not answer at all). ok is false for any other err, which
// is the caller's to answer (a wait that timed out, a client gone, the
// wait budget).
func ImageRefusal(err error, e gpu.ImageEngine) (ans Error, down, ok bool) {
	var refused *gpu.RefusedError
	switch {
	case errors.Is(err, gpu.ErrNoEngine):
		return JobRefused(err, true), false, true
	case errors.Is(err, gpu.ErrCancelledBeforeSent):
		return CancelledBeforeSent(e.Name()), false, true
	case errors.As(err, &refused) && jsonhttp.Refused(err):
		return EngineDown(false, e.Name(), e.Kind()), true, true
	case refused != nil:
		return JobRefused(err, false), false, true
	}
	return Error{}, false, false
}

// WriteImage answers err in the image engine e's error shape.
func WriteImage(w http.ResponseWriter, e gpu.ImageEngine, err Error) error {
	Write(w, ShapeOf("", e.Kind()), err)
	return nil
}
