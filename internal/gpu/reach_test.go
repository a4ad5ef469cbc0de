package gpu

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/jsonhttp"
)

// Only a call that got no answer is a failed contact; an answer of any
// kind, or a confirmation that failed after answers, is a contact; the
// caller's own deadline says nothing.
func TestReachabilityNote(t *testing.T) {
	refused := &jsonhttp.ContactError{Upstream: "e", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		name string
		from int8 // 0 unknown, 1 reachable, 2 not
		err  error
		want int8
	}{
		{"answered", 2, nil, 1},
		{"a non-2xx answer", 2, &jsonhttp.StatusError{Upstream: "e", Status: 401}, 1},
		{"a confirmation that never came", 2, fmt.Errorf("e still lists a model: %w", ErrNotEmptied), 1},
		{"refused", 1, refused, 2},
		{"refused, wrapped", 1, fmt.Errorf("unloading: %w", refused), 2},
		{"the caller's deadline", 1, context.DeadlineExceeded, 1},
		{"the caller's deadline, unknown before", 0, context.DeadlineExceeded, 0},
		{"another error", 2, errors.New("decoding the answer"), 2},
	} {
		r := reachability{v: c.from}
		r.note(c.err)
		if r.v != c.want {
			t.Errorf("%s: from %d, got %d, want %d", c.name, c.from, r.v, c.want)
		}
	}
}
