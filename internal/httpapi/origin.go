package httpapi

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// CrossOrigin refuses the requests that a page of another site can make a
// browser send to a route that changes state (a hold, a cancel): a form
// posted cross-site carries the browser's cached credentials (Basic auth,
// cookies), so auth in front of the route does not stop it. The rules are
// those of net/http's CrossOriginProtection, which does the checking:
// safe methods (GET, HEAD, OPTIONS) pass; otherwise a Sec-Fetch-Site
// other than same-origin or none is refused, and without that header an
// Origin whose host:port is not the request's Host is refused. A request
// with neither header (a script, curl) passes. So do requests from the
// trusted origins.
type CrossOrigin struct {
	cop *http.CrossOriginProtection
}

// NewCrossOrigin returns the check, letting the requests of each of the
// trusted origins through; an origin that is not scheme://host[:port] is
// an error naming it.
func NewCrossOrigin(trusted []string) (*CrossOrigin, error) {
	c := &CrossOrigin{cop: http.NewCrossOriginProtection()}
	for _, o := range trusted {
		norm, err := ParseOrigin(o)
		if err != nil {
			return nil, err
		}
		if err := c.cop.AddTrustedOrigin(norm); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ParseOrigin checks an origin as a browser sends it in its Origin header,
// scheme://host[:port], and returns it as the browser would send it:
// scheme and host in lower case, without the scheme's default port (the
// trusted origins are compared with the header as strings).
func ParseOrigin(origin string) (string, error) {
	u, err := url.Parse(origin)
	switch {
	case err != nil:
		return "", fmt.Errorf("invalid origin %q: %v", origin, err)
	case u.Scheme == "" || u.Host == "" || u.Opaque != "":
		return "", fmt.Errorf("invalid origin %q: want scheme://host[:port], such as https://app.example.com", origin)
	case u.User != nil:
		return "", fmt.Errorf("invalid origin %q: an origin has no user or password", origin)
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || strings.HasSuffix(origin, "#"):
		return "", fmt.Errorf("invalid origin %q: an origin has no path, query or fragment (not even a final /)", origin)
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if h, port, err := net.SplitHostPort(host); err == nil {
		if port == "" {
			return "", fmt.Errorf("invalid origin %q: empty port", origin)
		}
		if port == map[string]string{"http": "80", "https": "443"}[scheme] {
			host = h
			if strings.Contains(h, ":") {
				host = "[" + h + "]"
			}
		}
	}
	return scheme + "://" + host, nil
}

// Check returns a 403 Refusal for a cross-origin request, nil otherwise.
func (c *CrossOrigin) Check(r *http.Request) error {
	if c.cop.Check(r) == nil {
		return nil
	}
	from := "Origin " + r.Header.Get("Origin")
	if r.Header.Get("Origin") == "" {
		from = "Sec-Fetch-Site: " + r.Header.Get("Sec-Fetch-Site")
	}
	return &Refusal{Status: http.StatusForbidden, Message: fmt.Sprintf(
		"cross-origin request refused (%s, to %s): a page of another site cannot act here; "+
			"send it from this site, from a script (no Origin header), or add its origin to trusted_origins",
		clip(from), clip(r.Host))}
}

// Guard checks a request to a site route that changes state: Check, then
// RequireJSON.
func (c *CrossOrigin) Guard(r *http.Request) error {
	if err := c.Check(r); err != nil {
		return err
	}
	return RequireJSON(r)
}

// clip shortens a header's value quoted in a message.
func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// HandlerCrossOrigin is NewCrossOrigin for a handler's routes that change
// state: an invalid origin is an error naming the handler and the option.
func HandlerCrossOrigin(handler string, trusted []string) (*CrossOrigin, error) {
	c, err := NewCrossOrigin(trusted)
	if err != nil {
		return nil, fmt.Errorf("%s: trusted_origins: %v", handler, err)
	}
	return c, nil
}
