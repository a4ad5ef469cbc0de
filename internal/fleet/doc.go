// Package fleet is the front tier of several GPU hosts, each a Caddy with
// a gpu_turnstile: what a request asks for (Read: its class, model,
// workflow and client, from a bounded read of its body), what each host
// is doing (Follower: its status event stream, kept as an immutable Host
// snapshot), and which host a request goes to (Pick: pure rules over the
// snapshots, no I/O, lock or allocation). The Caddy modules that use it
// are the root package's (fleet.go).
package fleet
