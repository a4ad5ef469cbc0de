package config

import (
	"fmt"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/route"
)

// HandlerFields are where the gpu_turnstile directive's values go.
type HandlerFields struct {
	Class, Turnstile, Engine, DuringJob, WaitNotice *string
}

// UnmarshalHandler parses the gpu_turnstile directive into hd:
//
//	gpu_turnstile [<matcher>] [auto|llm|image|passthrough] {
//		turnstile  NAME
//		engine     NAME
//		during_job allow|reject
//		wait_notice [INTERVAL|off]
//	}
func UnmarshalHandler(d *caddyfile.Dispenser, hd HandlerFields) error {
	d.Next() // the directive's name
	class, err := optionalArg(d)
	if err != nil {
		return err
	}
	if _, err := route.ParseClass(class); err != nil {
		return d.Errf("gpu_turnstile: %v", err)
	}
	*hd.Class = class
	options := handlerOptions(hd)
	seen := OptionLines{}
	for d.NextBlock(0) {
		if err := seen.Once(d); err != nil {
			return err
		}
		opt := d.Val()
		dst, ok := options[opt]
		if !ok {
			return d.Errf("gpu_turnstile: unknown option %q", opt)
		}
		if opt == "wait_notice" {
			if err := parseWaitNotice(d, dst); err != nil {
				return err
			}
			continue
		}
		v, err := OneArg(d)
		if err != nil {
			return err
		}
		if opt == "during_job" && v != "allow" && v != "reject" {
			return d.Errf("during_job: %q is neither allow nor reject", v)
		}
		*dst = v
	}
	return nil
}

// optionalArg reads a directive's one optional argument ("" if none).
func optionalArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", nil
	}
	v := d.Val()
	if d.NextArg() {
		return "", d.ArgErr()
	}
	return v, nil
}

// UnmarshalSiteRoute parses a directive of a site's routes into one
// turnstile: the turnstile it names (as its argument or as the turnstile
// option), the origins it trusts (trusted_origins, repeatable), and
// options that take no argument and set a flag.
func UnmarshalSiteRoute(d *caddyfile.Dispenser, name *string, origins *[]string, flags map[string]*bool) error {
	return unmarshalSiteRoute(d, name, origins, flags, nil)
}

// UnmarshalStatusRoute parses the gpu_turnstile_status directive as
// UnmarshalSiteRoute does, with its detail option (full or public) into
// detail:
//
//	gpu_turnstile_status [NAME] {
//		turnstile       NAME
//		detail          full|public
//		controls
//		trusted_origins URL...
//	}
func UnmarshalStatusRoute(d *caddyfile.Dispenser, name *string, origins *[]string, controls *bool, detail *string) error {
	return unmarshalSiteRoute(d, name, origins, map[string]*bool{"controls": controls}, map[string]func(string) error{
		"detail": func(v string) error {
			if _, err := StatusDetailFull(v); err != nil {
				return err
			}
			*detail = v
			return nil
		},
	})
}

// StatusDetailFull reports whether a status handler's detail gives the
// full status: "full" does; "public" and "" (the default) give the
// public view; anything else is an error.
func StatusDetailFull(detail string) (bool, error) {
	switch detail {
	case "full":
		return true, nil
	case "", "public":
		return false, nil
	}
	return false, fmt.Errorf("detail %q: want full or public", detail)
}

// unmarshalSiteRoute is UnmarshalSiteRoute with options that take one
// argument, each checked and set by its func in values.
func unmarshalSiteRoute(d *caddyfile.Dispenser, name *string, origins *[]string, flags map[string]*bool,
	values map[string]func(string) error) error {
	d.Next() // the directive's name
	directive := d.Val()
	arg, err := optionalArg(d)
	if err != nil {
		return err
	}
	if arg != "" {
		*name = arg
	}
	seen := OptionLines{}
	for d.NextBlock(0) {
		if err := seen.Once(d); err != nil {
			return err
		}
		switch opt := d.Val(); opt {
		case "turnstile":
			v, err := OneArg(d)
			if err != nil {
				return err
			}
			*name = v
		case "trusted_origins":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.Errf("%s: trusted_origins: want one or more origins, such as https://app.example.com", directive)
			}
			for _, o := range args {
				if _, err := httpapi.ParseOrigin(o); err != nil {
					return d.Errf("%s: trusted_origins: %v", directive, err)
				}
			}
			*origins = append(*origins, args...)
		default:
			if set, ok := values[opt]; ok {
				v, err := OneArg(d)
				if err != nil {
					return err
				}
				if err := set(v); err != nil {
					return d.Errf("%s: %v", directive, err)
				}
				continue
			}
			flag, ok := flags[opt]
			if !ok {
				return d.Errf("%s: unknown option %q", directive, opt)
			}
			if d.NextArg() {
				return d.Errf("%s: %s takes no argument", directive, opt)
			}
			*flag = true
		}
	}
	return nil
}
