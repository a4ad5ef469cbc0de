//go:build !race

package turnstile

const raceEnabled = false
