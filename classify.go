package turnstile

import (
	"net/http"

	tcfg "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/config"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// The classification of requests lives in internal/route; these are its
// names in the root.
type (
	class        = route.Class
	engineRoutes = route.EngineRoutes
)

const (
	classAuto        = route.Auto
	classPassthrough = route.Passthrough
	classLLM         = route.LLM
	classImage       = route.Image
)

// classify is route's classification with the engines' routes.
func classify(r *http.Request) class { return tcfg.Routes.Classify(r) }

// cleanPath is r's path as classify compares it.
func cleanPath(r *http.Request) string { return route.CleanPath(r) }

// imageKind is the kind of image engine a POST to the cleaned path p
// starts a job on, or "".
func imageKind(p string) string { return tcfg.Routes.ImageKind(p) }
