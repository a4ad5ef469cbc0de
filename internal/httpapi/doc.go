// Package httpapi holds the turnstile's HTTP APIs, apart from their Caddy
// modules: the status JSON and its handler's views (the page, the live
// events, readiness, history), the hold routes, the cancel route, the
// admin endpoint's routes, the cross-origin check of the routes that
// change state, and the error shape of every API the turnstile answers
// for. It reaches a turnstile through Turnstile and Turnstiles, which the
// root provides; what a GPU does is internal/gpu's.
package httpapi
