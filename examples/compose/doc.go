// Package compose holds the checks of the compose stack in this
// directory (compose.yaml, its Caddyfile, and the image it builds from
// examples/docker/Dockerfile). The package has no code of its own; run
//
//	go test ./...
//
// from this directory. The mounted Caddyfile is adapted by a Caddy built
// with the plugin: $CADDY_BIN, or one built with ../../xcaddy.sh.
package compose
