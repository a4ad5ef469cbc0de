package config

import (
	"fmt"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// DefaultWaitNotice is wait_notice's interval when it is on without one.
const DefaultWaitNotice = 5 * time.Second

// minWaitNotice is the shortest interval wait_notice takes: notices are
// for a person to read.
const minWaitNotice = 100 * time.Millisecond

// ParseWaitNotice reads a wait_notice value: "on" (the default
// interval), "off" (0), or an interval from 100ms. It is the JSON
// field's value as the Caddyfile writes it; "" is not a value.
func ParseWaitNotice(v string) (time.Duration, error) {
	switch v {
	case "on":
		return DefaultWaitNotice, nil
	case "off":
		return 0, nil
	}
	d, err := caddy.ParseDuration(v)
	if err != nil || d < minWaitNotice {
		return 0, fmt.Errorf("wait_notice: %q: want off, on or an interval of at least 100ms (e.g. 5s)", v)
	}
	return d, nil
}

// parseWaitNotice reads `wait_notice [INTERVAL|off]` into dst: without
// an argument, "on".
func parseWaitNotice(d *caddyfile.Dispenser, dst *string) error {
	v := "on"
	if d.NextArg() {
		v = d.Val()
		if d.NextArg() {
			return d.Errf("wait_notice: one value expected, got more")
		}
	}
	if _, err := ParseWaitNotice(v); err != nil {
		return d.Errf("%v", err)
	}
	*dst = v
	return nil
}

// validateNotice reads wait_notice (off unless set).
func validateNotice(s Settings, c *Turnstile) error {
	if s.WaitNotice == "" {
		return nil
	}
	d, err := ParseWaitNotice(s.WaitNotice)
	c.WaitNotice = d
	return err
}
