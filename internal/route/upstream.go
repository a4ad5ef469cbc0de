package route

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/netaddr"
)

// Upstream is the reverse_proxy upstream of an engine's URL: its scheme
// and host:port (https makes reverse_proxy's transport use TLS). A URL
// with credentials, a path, a query or a fragment is refused: an upstream
// carries none of them, and the requests would reach the engine without.
func Upstream(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", errors.New("does not parse as a URL")
	}
	if _, err := netaddr.HostPort(rawURL); err != nil {
		return "", errors.New("is not http(s)://host[:port]")
	}
	var what string
	switch {
	case u.User != nil:
		what = "credentials"
	case u.Path != "" && u.Path != "/":
		what = fmt.Sprintf("a path (%s)", u.EscapedPath())
	case u.RawQuery != "" || u.ForceQuery:
		what = "a query"
	case u.Fragment != "":
		what = "a fragment"
	default:
		return u.Scheme + "://" + u.Host, nil
	}
	return "", fmt.Errorf("has %s, which a reverse_proxy upstream cannot carry", what)
}
