package gpu

import "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"

// The orchestration drives the engines that share the GPU only through the
// interfaces of package engine; one adapter per kind, under engine/, fits
// its client to them. These names keep the orchestration's own spelling.

// Engine is what every engine has: a kind, a name and a URL.
type Engine = engine.Engine

// LLMEngine is an engine whose requests share the GPU.
type LLMEngine = engine.LLM

// ImageEngine is an engine whose jobs take the GPU alone.
type ImageEngine = engine.Image

// Keeper is an LLM engine that can be emptied of all but some models.
type Keeper = engine.Keeper

// Waker is an LLM engine that is woken before LLM requests go again.
type Waker = engine.Waker

// Preparer is an image engine that needs a step before a job once freed.
type Preparer = engine.Preparer

// RunningInterrupter is an image engine whose interrupt names no job.
type RunningInterrupter = engine.RunningInterrupter

// Inheritor is an engine whose new adapter inherits from the old one.
type Inheritor = engine.Inheritor

// Watch follows an image engine's events.
type Watch = engine.Watch

// OutcomeLost is the outcome of a job the engine no longer knows.
const OutcomeLost = engine.OutcomeLost

var (
	// ErrNotEmptied is wrapped by the error of an LLM engine that could
	// not be emptied.
	ErrNotEmptied = engine.ErrNotEmptied
	// ErrCannotEmpty is wrapped by the error of an LLM engine that can
	// never be emptied as it runs.
	ErrCannotEmpty = engine.ErrCannotEmpty
	// ErrNoGPUReading is wrapped by the error of an engine or probe that
	// reports no GPU memory.
	ErrNoGPUReading = engine.ErrNoGPUReading
)
