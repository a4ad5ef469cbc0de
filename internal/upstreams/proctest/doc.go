// Package proctest runs a fake engine as the OS sees the real one: a
// front process that listens on the engine's port and forwards every
// request to the in-process fake, and the model servers it starts as its
// own children. The turnstile decides that an engine is empty from its
// API and from its processes (internal/procs: the listener of its port,
// its descendants, the model servers' ports); a fake that lived only in
// the test process could not show a killed engine whose model server
// lives on, re-parented, holding the card.
//
// The fronts and the model servers are the test binary itself, started
// again with an environment variable that this package's init reads: any
// test binary that imports proctest can be a front. None outlives the test
// binary: each holds a pipe whose write end only the test process has,
// and exits at its end of file; and every front and child a test starts
// is killed at the test's cleanup.
//
// A front forwards each HTTP request to the fake unchanged and streams the
// answer back as it comes, as a Go reverse proxy does (llama-swap is one):
// an HTTP front, not a TCP relay, so that on SIGTERM it closes its port
// at once and drains the requests in flight, not idle keep-alive
// connections, as http.Server.Shutdown does.
package proctest
