// Package served remembers the processes that served an LLM engine's
// models, and tells whether they are gone.
//
// An engine's API is not the last word on whether it holds the GPU: its
// model servers can outlive it. llama-swap starts each in its own process
// group, so a killed llama-swap leaves them running, and a restarted one
// lists none of them; Ollama's runners outlive a killed `ollama serve`; a
// llama.cpp router's child lives until its load ends; vLLM's engine-core
// workers hold the memory, not its API server. So, while an engine on this
// host is reachable, what it runs is looked at (Look): the listener of its
// URL's port, the model servers its kind names (engine.Kind.Servers) and
// the descendants of both, each remembered as a procs.ID (a PID with its
// start time: a reused PID is another process). A Record is that memory;
// it is kept across restarts by the caller.
//
// Gone says what is left of a record: Left after the engine's API
// confirmed it empty (its model servers), LeftRefused when it refuses
// connections (its listener too). Processes that cannot be seen (another
// user's without the capabilities to read them, hidepid, another
// namespace or host) make the record Unseen, which is never "gone": the
// caller then asks the card.
//
// The package decides from a procs.Table and does no I/O of its own.
package served
