package presence

import (
	"context"
	"fmt"
)

// ownCheck asks for the engines' processes (a walk of the process table)
// only when a sample has a process to judge, except that it asks at the
// first sample, to find at once engines this machine cannot see, and at
// every sample while they could not be seen, so that the condition stays
// off, and says why, until they can.
type ownCheck struct {
	f       func(ctx context.Context) (map[int32]bool, error) // nil: no engine process is known
	checked bool
	off     bool
}

// check returns the engines' processes, or nil when need is false and
// nothing else calls for a look. An *OffError from f is returned as it
// is; another error says what failed.
func (o *ownCheck) check(ctx context.Context, need bool) (map[int32]bool, error) {
	if o.f == nil || (!need && o.checked && !o.off) {
		return nil, nil
	}
	own, err := o.f(ctx)
	if IsOff(err) {
		o.checked, o.off = true, true
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("finding the engines' processes: %w", err)
	}
	o.checked, o.off = true, false
	return own, nil
}
