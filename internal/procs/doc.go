// Package procs finds the processes an engine runs on this host and tells
// whether they are still alive: the listener of its URL's port, the model
// servers it starts, and their descendants.
//
// An engine's API is not the last word on whether it holds the GPU: its
// model servers can outlive it (llama-swap starts each in its own process
// group, so they are re-parented to init when it dies; Ollama's runners
// outlive a killed server). What the turnstile remembers of a
// process is its ID, a PID with the process's start time, so that a PID the
// kernel has reused names another process and is not mistaken for the one
// remembered.
//
// A process that cannot be seen is not a process that is gone: another
// user's sockets cannot be mapped to their PID without
// CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE, a /proc mounted with hidepid
// hides them, and a process in another PID namespace has another PID.
// Listener says so (Unseen) rather than answering "nobody".
//
// The package does no I/O of its own beyond reading the process table
// (/proc on Linux, gopsutil elsewhere) and the host's sockets; it keeps no
// state, starts no goroutine, and imports nothing else of this module.
package procs
