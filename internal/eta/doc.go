// Package eta is what one turnstile has measured of its own work and the
// prediction it makes from it: when each request that waits for the GPU
// is expected to have it.
//
// Learned holds the figures: the run time of image jobs by workflow
// signature, and each engine's unload, free, wake, prepare and model load
// times, each the median of its last few measures. Predict walks the
// queue in the order the lock will serve it (package lock: the exclusive
// waiters first in first out, presence holds at the front, the LLM
// waiters once the exclusive waiters are served or the streak bound gives
// them a turn) from what holds the GPU now and the steps still to come.
//
// Like internal/gpu/ledger it does no I/O and reads no clock: the caller
// passes now, and calls it under its own mutex.
package eta
