package fleetcaddy

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/fleet"
)

func init() {
	caddy.RegisterModule(ClassifyHandler{})
	httpcaddyfile.RegisterHandlerDirective("gpu_turnstile_classify", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		c := new(ClassifyHandler)
		return c, c.UnmarshalCaddyfile(h.Dispenser)
	})
	// Where gpu_turnstile is: before the handlers that answer, so that
	// the reverse_proxy after it reads what it found.
	httpcaddyfile.RegisterDirectiveOrder("gpu_turnstile_classify", httpcaddyfile.After, "encode")
}

// The request variables ClassifyHandler sets.
const (
	VarClass    = "gpu_turnstile.class"    // llm, image or passthrough
	VarModel    = "gpu_turnstile.model"    // the model an LLM request names
	VarWorkflow = "gpu_turnstile.workflow" // an image job's workflow signature
	// varRequest holds the *fleet.Request the selection policy reads.
	varRequest = "gpu_turnstile.request"
)

// ClassifyHandler reads what a request asks of a GPU host for the
// gpu_turnstile selection policy of a front tier: its class (by its route,
// as gpu_turnstile in auto mode), and from a bounded read of its body the
// model, workflow and client it names, into the request variables
// gpu_turnstile.class, gpu_turnstile.model and gpu_turnstile.workflow. The
// body goes on whole. A body over the limit is classified by its route
// alone (model and workflow unknown) and still proxied.
type ClassifyHandler struct {
	// BodyLimit is how much of a body is read (default 4 MiB).
	BodyLimit int64 `json:"body_limit,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (ClassifyHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.gpu_turnstile_classify",
		New: func() caddy.Module { return new(ClassifyHandler) },
	}
}

// limit is the body limit in force.
func (c *ClassifyHandler) limit() int64 {
	if c.BodyLimit > 0 {
		return c.BodyLimit
	}
	return fleet.DefaultBodyLimit
}

// ServeHTTP classifies r and passes it on.
func (c *ClassifyHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	q, err := fleet.Read(r, c.limit())
	if err != nil {
		return caddyhttp.Error(http.StatusBadRequest, err)
	}
	ctx := r.Context()
	caddyhttp.SetVar(ctx, VarClass, q.Class.String())
	caddyhttp.SetVar(ctx, VarModel, q.Model)
	caddyhttp.SetVar(ctx, VarWorkflow, q.Workflow)
	caddyhttp.SetVar(ctx, varRequest, q)
	defer q.Done()
	return next.ServeHTTP(w, r)
}

// UnmarshalCaddyfile reads
//
//	gpu_turnstile_classify [{
//		body_limit SIZE
//	}]
func (c *ClassifyHandler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "body_limit":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := humanize.ParseBytes(d.Val())
			if err != nil || n == 0 {
				return d.Errf("body_limit %q: want a size such as 4MiB", d.Val())
			}
			c.BodyLimit = int64(n)
			if d.NextArg() {
				return d.ArgErr()
			}
		default:
			return d.Errf("gpu_turnstile_classify: unknown option %q (want body_limit)", d.Val())
		}
	}
	return nil
}

var (
	_ caddyhttp.MiddlewareHandler = (*ClassifyHandler)(nil)
	_ caddyfile.Unmarshaler       = (*ClassifyHandler)(nil)
)
