package engine

import (
	"context"
	"net/http"
	"time"
)

// Class is what an engine's work needs of the GPU, as the settings and the
// Caddyfile name it.
type Class string

const (
	ClassLLM   Class = "llm"   // shares the GPU with the other LLM engines
	ClassImage Class = "image" // takes the GPU alone for a job
)

// Dialect is the error shape of an engine's API: the one its clients
// parse, in which the turnstile answers in its place.
type Dialect uint8

const (
	// DialectOllama is {"error": "..."}, which is also the shape of a
	// route whose API is not known.
	DialectOllama Dialect = iota
	// DialectOpenAI is {"error": {"message", "type", "param", "code"}}
	// (/v1/ on every LLM engine).
	DialectOpenAI
	// DialectComfyUI is {"error": {"type", "message", "details",
	// "extra_info"}, "node_errors": {}}.
	DialectComfyUI
	// DialectA1111 (and Forge) is {"error", "detail", "body", "errors"}.
	DialectA1111
)

// WatchBy is how work started on an image engine without the turnstile
// is seen.
type WatchBy uint8

const (
	WatchNone    WatchBy = iota // not watched
	WatchSocket                 // a live connection (ComfyUI's websocket)
	WatchPolling                // polling the engine's progress
)

// Options are the timings an adapter is built with, and the headers its
// client sends.
type Options struct {
	UnloadPoll     time.Duration // how often an unload or a free is checked
	HistoryPoll    time.Duration // how often a job's progress is read
	BackoffInitial time.Duration // the first retry delay of a live connection
	BackoffMax     time.Duration // the cap of that delay
	// Header goes with every request the turnstile makes to the engine
	// (its API key): never logged or shown.
	Header http.Header
}

// Routes are what classification knows of a kind's routes, as cleaned,
// lower-case paths.
type Routes struct {
	// LLM are the paths a POST to which is LLM work.
	LLM []string
	// LLMPrefixes are the prefixes (ending in /) under which a POST is
	// LLM work (/v1/ for an OpenAI-compatible API).
	LLMPrefixes []string
	// AnyMethod are roots at which, or under which, a request of any
	// method loads a model on demand (llama-swap's /upstream).
	AnyMethod []string
	// ModelQuery says a request of any method that names ?model= loads
	// it (a llama.cpp router's GET routes).
	ModelQuery bool
	// Jobs are the paths a POST to which starts a job on an image engine
	// of this kind.
	Jobs []string
	// ServesJobsOf is the image kind whose job routes this LLM kind
	// serves as LLM work (llama-swap serves A1111's).
	ServesJobsOf string
}

// Guess is how a request's route tells its engine's kind when the
// turnstile does not know the engine (a busy answer's error shape, the
// engine a failed forward is blamed on).
type Guess struct {
	Prefixes []string // paths under these are this kind's
	APINames []string // the first segments after /api/ of its routes
	Roots    []string // the first segments of its routes, also served under /api/
	APIRest  bool     // any other /api/ route is taken for this kind's
}

// VRAMProbe reads how much memory the card has free, across processes
// (the orchestration's VRAM probe).
type VRAMProbe interface {
	FreeVRAM(ctx context.Context) (int64, error)
	String() string
}

// Kind is everything the turnstile knows of one kind of engine. Each kind
// package under engine/ exports one, and the registry (engine/kinds) lists
// them; nothing else names a kind.
type Kind struct {
	Name  string // as the settings spell it
	Title string // as the docs and people spell it
	Class Class

	// New builds the engine's adapter, named name, at url.
	New func(name, url string, o Options) (Engine, error)

	// Shorthand is the option that gives the class's first engine by its
	// URL alone, if the kind has one (`NAME URL` is `CLASS KIND URL`).
	Shorthand string
	// Label is the key of an engine named after its kind in the status's
	// upstreams map and its upstream label in the metrics, where they
	// predate kinds; Name if empty.
	Label string

	// Warms says it can load warm_model ahead of a request.
	Warms bool
	// Sleeps says it is emptied by being put to sleep, and woken before
	// LLM use resumes (its adapter is a Waker).
	Sleeps bool

	// Probe is vram_probe's name for reading the card through an engine
	// of this kind, if it can; NewProbe makes that probe of engine e for
	// the GPU of CUDA index index.
	Probe    string
	NewProbe func(e Engine, index int) VRAMProbe

	Routes  Routes
	Guess   Guess
	Dialect Dialect
	// Watch is how work that bypassed the turnstile is seen on it.
	Watch WatchBy

	// JobID reads a queued job's id from the start of the engine's answer
	// to a job route; nil for a synchronous engine, whose answer is the
	// job's end.
	JobID func(answer []byte) (string, bool)
	// Signature is the key under which an image job's memory peak is
	// learned (package workflow), "" if the job cannot be read; path is
	// cleaned and lower case.
	Signature func(path string, body []byte) string

	// OOM are texts (lower case) of the engine's answer when a model does
	// not fit in memory.
	OOM []string
	// ModelKey is the canonical name of a model the engine names (Ollama
	// lists "llama3.2" as "llama3.2:latest"); nil if names are kept as
	// they are.
	ModelKey func(name string) string

	// Servers finds an LLM engine's model servers on this host beyond
	// the descendants of the process listening on its port, which are
	// always taken (a llama.cpp router's children, vLLM's engine-core
	// workers): llama-swap's are the listeners of the proxy ports that
	// /running lists, Ollama's runners are found by their command line.
	// nil: the descendants are all. models says whether the models are
	// wanted too (else they are listed only if the same answer has them).
	Servers func(ctx context.Context, e LLM, models bool) (ModelServers, error)
}

// ModelServers is what an engine's kind finds of its model servers.
type ModelServers struct {
	// Ports are the ports its model servers listen on, on this host.
	Ports []int
	// PIDs are model server processes found otherwise.
	PIDs []int32
	// Models, if Listed, are the models loaded, from the same answer.
	Models []string
	Listed bool
	// Complete says PIDs hold every model server of the engine on this
	// host whether or not its listener can be seen (Ollama's runners
	// carry the port of their server in their environment).
	Complete bool
}

// LabelOrName is k's legacy label: Label, or Name.
func (k *Kind) LabelOrName() string {
	if k.Label != "" {
		return k.Label
	}
	return k.Name
}

// Described is an adapter that tells its kind's descriptor.
type Described interface {
	Descriptor() *Kind
}

// KindOf is e's descriptor, nil if its adapter does not tell it.
func KindOf(e Engine) *Kind {
	if d, ok := e.(Described); ok {
		return d.Descriptor()
	}
	return nil
}

// Label is e's key in the status's upstreams map and its metric label
// where those predate kinds: its kind's label for an engine named after
// its kind, else its name (upstreams map) or its kind (metrics, byName
// false).
func Label(e Engine, byName bool) string {
	k := KindOf(e)
	switch {
	case k != nil && (!byName || e.Name() == k.Name):
		return k.LabelOrName()
	case byName:
		return e.Name()
	}
	return e.Kind()
}
