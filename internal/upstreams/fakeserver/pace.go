package fakeserver

import "time"

// Default values of the fakes' generation options.
const (
	Tokens     = 5
	TokenDelay = 2 * time.Millisecond
)

// Pacer paces a generation: Tokens tokens, Delay apart, the first held
// while Gate is.
type Pacer struct {
	Tokens int
	Delay  time.Duration
	Gate   *Gate
}

// Run produces the tokens: before each but the first it waits Delay,
// emit produces token i, and after the first it waits while the gate is
// held. wait blocks until ready is closed and returns nil, or returns why
// the generation must end first (its client gone, its process stopping);
// Run then returns that, as it returns an error of emit.
func (p Pacer) Run(wait func(ready <-chan struct{}) error, emit func(i int) error) error {
	for i := range p.Tokens {
		if i > 0 {
			if err := sleep(wait, p.Delay); err != nil {
				return err
			}
		}
		if err := emit(i); err != nil {
			return err
		}
		if i == 0 && p.Gate != nil {
			if held := p.Gate.Held(); held != nil {
				if err := wait(held); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sleep waits d through wait.
func sleep(wait func(<-chan struct{}) error, d time.Duration) error {
	ready := make(chan struct{})
	t := time.AfterFunc(d, func() { close(ready) })
	defer t.Stop()
	return wait(ready)
}

// Sleep waits d, and reports false if done is closed first.
func Sleep(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}

// Default sets an option left at its zero value to d.
func Default[T comparable](option *T, d T) {
	var zero T
	if *option == zero {
		*option = d
	}
}
