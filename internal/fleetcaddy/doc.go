// Package fleetcaddy is the Caddy wiring of a front tier over several GPU
// hosts (internal/fleet): the gpu_turnstile_classify handler, the
// gpu_turnstile selection policy of reverse_proxy, and the
// gpu_turnstile_fleet directive that expands into both. Importing it
// registers them; the root package does.
package fleetcaddy
