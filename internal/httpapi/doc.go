// Package httpapi holds what the turnstile's HTTP routes share and that is
// not Caddy wiring: the cross-origin check of the routes that change
// state, and the error shape of each engine API the turnstile answers for.
package httpapi
