package engine

// Fake is a fake engine started for a test, a benchmark or the demo, on a
// simulated card (the fakes under internal/upstreams; the registry's test
// support, engine/kinds/kindstest, lists them by kind).
type Fake struct {
	URL     string
	Close   func()
	Service string // the name it uses on the simulated card

	// An LLM engine's chat route and a model it serves; an image engine's
	// job route and a job it runs.
	ChatPath, ChatModel string
	JobPath, JobBody    string

	// Server is the fake itself (its package's *Server), for what a test
	// asks of one kind.
	Server any
}
