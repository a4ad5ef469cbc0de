package presence

import (
	"errors"
	"fmt"
)

// An OffError says why a condition cannot be judged on this host: the
// source reports nothing (nvidia-smi pmon unsupported on the card, no
// Steam registry), or the engines run where their processes cannot be
// told from a person's (a container, another machine). A Watcher counts
// a sample that returns one as clear, so a hold it engaged is released in
// time, and shows the reason in the status.
type OffError struct {
	Reason string
}

func (e *OffError) Error() string { return "off: " + e.Reason }

// offf returns an *OffError with a formatted reason.
func offf(format string, args ...any) error {
	return &OffError{Reason: fmt.Sprintf(format, args...)}
}

// IsOff reports whether err says the condition is off.
func IsOff(err error) bool {
	var off *OffError
	return errors.As(err, &off)
}
