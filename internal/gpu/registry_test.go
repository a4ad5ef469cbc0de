package gpu

// The registry of kinds registers their model naming and out-of-memory
// texts, which modelKey and isOOM consult.
import _ "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine/kinds"
