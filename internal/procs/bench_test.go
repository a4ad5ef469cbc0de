package procs

import (
	"context"
	"testing"
)

// What one look at an engine's processes costs: the process table (every
// look), and the host's listening sockets (only when a listener known is
// gone, a port is new, or 5 s passed; see internal/gpu/listeners.go).

func BenchmarkSnapshot(b *testing.B) {
	for b.Loop() {
		if _, err := Snapshot(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkListeners(b *testing.B) {
	for b.Loop() {
		if _, err := Listeners(context.Background(), []int{11434, 8080}); err != nil {
			b.Fatal(err)
		}
	}
}
