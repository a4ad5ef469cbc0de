package gpu

import (
	"errors"
	"time"
)

// The leases of the holds that clients ask for.
const (
	// DefaultHoldTTL is a new hold's lease when its request names none.
	DefaultHoldTTL = 5 * time.Minute
	// MaxHoldTTL bounds one lease; a holder renews to keep the GPU
	// longer.
	MaxHoldTTL = 24 * time.Hour
)

// ErrPresenceHold is returned when a presence hold is asked to end or be
// renewed by a client: it has no lease, and it ends when its hold_while
// condition clears (ended early, its watch would not take it again while
// the condition holds).
var ErrPresenceHold = errors.New("it ends when its hold_while condition clears")

// ErrHoldEnded is returned by Release for a hold that has ended already.
var ErrHoldEnded = errors.New("the hold has ended")

// Leased returns nil if h's holder may end or renew it, ErrPresenceHold
// for a presence hold.
func (h *Hold) Leased() error {
	if h.Presence() {
		return ErrPresenceHold
	}
	return nil
}

// Release ends h at its holder's request: ErrPresenceHold for a presence
// hold, ErrHoldEnded if it has ended already.
func (h *Hold) Release() error {
	if err := h.Leased(); err != nil {
		return err
	}
	if !h.End("released") {
		return ErrHoldEnded
	}
	return nil
}
