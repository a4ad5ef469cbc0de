package config

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// engineHeader is the headers the turnstile sends to an engine (header
// in its block): placeholders such as {env.KEY} expanded, names made
// canonical. Errors name the header, never its value.
func engineHeader(h http.Header) (http.Header, error) {
	if len(h) == 0 {
		return nil, nil
	}
	repl := caddy.NewReplacer()
	out := http.Header{}
	for name, vs := range h {
		if err := checkHeaderName(name); err != nil {
			return nil, err
		}
		if len(vs) == 0 {
			return nil, fmt.Errorf("header %s: no value", name)
		}
		for _, v := range vs {
			x := repl.ReplaceKnown(v, "")
			if strings.TrimSpace(x) == "" {
				return nil, fmt.Errorf("header %s: empty value (is its environment variable set?)", name)
			}
			if !validHeaderValue(x) {
				return nil, fmt.Errorf("header %s: its value has a control character (a line break?)", name)
			}
			out.Add(name, x)
		}
	}
	return out, nil
}

// checkHeaderName reports what is wrong with a header's name (RFC 9110's
// token).
func checkHeaderName(name string) error {
	if name == "" {
		return fmt.Errorf("header: empty name")
	}
	for _, r := range name {
		if !isTokenChar(r) {
			return fmt.Errorf("header %q: invalid name (want letters, digits and !#$%%&'*+-.^_`|~)", name)
		}
	}
	return nil
}

func isTokenChar(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

// validHeaderValue reports whether v can be sent as a header's value: no
// control character but tab.
func validHeaderValue(v string) bool {
	for _, r := range v {
		if r < ' ' && r != '\t' || r == 0x7f {
			return false
		}
	}
	return true
}
