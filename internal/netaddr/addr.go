// Package netaddr compares an engine's URL with the upstream Caddy's
// reverse_proxy dialled, as host:port with no DNS lookup: host names
// case-insensitively, the loopback names (localhost, 127.0.0.1, ::1) as
// one, and a URL's missing port filled in from its scheme.
package netaddr

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Addr is a host:port in the form it is compared in.
type Addr struct {
	host, port string
}

// String is the address as host:port.
func (a Addr) String() string { return net.JoinHostPort(a.host, a.port) }

// EngineAddr is the address of an engine's URL (http or https, the port
// defaulting to 80 or 443).
func EngineAddr(rawURL string) (Addr, error) {
	host, port, err := hostPort(rawURL)
	if err != nil {
		return Addr{}, err
	}
	return Addr{host: canonicalHost(host), port: port}, nil
}

// HostPort is an engine URL's host:port as written (the port filled in
// from the scheme): what reverse_proxy dials when given that URL.
func HostPort(rawURL string) (string, error) {
	host, port, err := hostPort(rawURL)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(host, port), nil
}

func hostPort(rawURL string) (host, port string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", err
	}
	host, port = u.Hostname(), u.Port()
	switch {
	case host == "":
		return "", "", fmt.Errorf("URL %q has no host", rawURL)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", "", fmt.Errorf("URL %q: scheme %q is neither http nor https", rawURL, u.Scheme)
	case port != "":
	case u.Scheme == "http":
		port = "80"
	default:
		port = "443"
	}
	return host, port, nil
}

// UpstreamAddr is the address of reverse_proxy's upstream as it reports
// it (http.reverse_proxy.upstream.hostport: host:port, the port always
// there for a network address). Anything else, such as a unix socket's
// path, is kept whole as the host, which no engine has.
func UpstreamAddr(hostport string) Addr {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return Addr{host: hostport}
	}
	return Addr{host: canonicalHost(host), port: port}
}

// canonicalHost lower-cases a host and gives the loopback names one
// spelling. It allocates only for a name with upper case in it.
func canonicalHost(host string) string {
	host = strings.ToLower(host)
	switch host {
	case "localhost", "127.0.0.1", "::1":
		return "localhost"
	}
	return host
}

// Local reports whether a is on this host: a loopback name or address.
func (a Addr) Local() bool {
	if a.host == "localhost" {
		return true
	}
	ip := net.ParseIP(a.host)
	return ip != nil && ip.IsLoopback()
}

// Port is a's port as a number, 0 if it is none.
func (a Addr) Port() int {
	n, err := strconv.Atoi(a.port)
	if err != nil {
		return 0
	}
	return n
}
