package turnstile

import (
	"fmt"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
)

// newCrossOrigin returns the cross-origin check of a handler's routes
// that change state, trusting the given origins; an invalid one is an
// error naming the handler and the option.
func newCrossOrigin(handler string, trusted []string) (*httpapi.CrossOrigin, error) {
	c, err := httpapi.NewCrossOrigin(trusted)
	if err != nil {
		return nil, fmt.Errorf("%s: trusted_origins: %v", handler, err)
	}
	return c, nil
}
