// Package route decides what a request needs of the GPU, from its method
// and path as the engines would route it (Table.Classify), and tells
// whether the upstream Caddy's reverse_proxy sent a request to is one of
// a turnstile's engines (Guard): a turnstile that empties one server while
// the traffic goes to another lets the GPU be shared unseen. It knows the
// engines' routes only as data (a Table), and imports neither Caddy nor
// the config.
package route
