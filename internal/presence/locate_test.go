package presence

import (
	"slices"
	"testing"
)

func TestEnginePorts(t *testing.T) {
	got := enginePorts([]string{"http://127.0.0.1:11434", "https://gpu.lan", "http://comfy.lan", "://bad"})
	if want := []int{11434, 443, 80}; !slices.Equal(got, want) {
		t.Fatalf("ports %v, want %v", got, want)
	}
}
