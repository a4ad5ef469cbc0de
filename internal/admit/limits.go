package admit

import "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"

// LLMBodyLimit bounds how much of an LLM request's body is read into
// memory before it waits for the GPU. Reading the body to its end is what
// lets Go's server notice a client that goes away while waiting; a larger
// body waits with its rest unread (llm_wait_timeout still bounds the
// wait). What all waiting requests buffer together is bounded by
// wait_buffer_limit.
const LLMBodyLimit = 8 << 20

// ImageBodyLimit bounds how much of an image job's body is read into
// memory before it waits (workflows are JSON graphs, rarely over a few
// MiB); within wait_buffer_limit, like LLM bodies.
const ImageBodyLimit = 32 << 20

// Workflow is the signature of an image job's workflow (its kind's
// Signature, internal/workflow) for an engine of kind at path, from its
// body as read for its wait.
func (t *Ticket) Workflow(kind, path string) string {
	return kinds.Signature(kind, path, t.Head(ImageBodyLimit))
}
