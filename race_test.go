//go:build race

package turnstile

// raceEnabled: the race detector makes every byte a test moves costly, so
// tests that move hundreds of MiB scale their sizes down under it.
const raceEnabled = true
