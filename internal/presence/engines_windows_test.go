package presence

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"
)

// An engine's processes are the listener and its descendants (Ollama's
// runners, llama.cpp's children). On Windows each process's parent comes
// from the process snapshot: the helper this test starts is its child, and
// the helper's own child is the helper's. (Under Wine this is all of
// EnginePIDs that runs; see TestEnginePIDs.)
func TestChildrenOfOnWindows(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, self, "", "listen")
	_, grandchild := h.listening(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	children, err := childrenOf(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := children[int32(os.Getpid())]; !slices.Contains(got, h.pid()) {
		t.Errorf("children of the test process: %v; want the helper %d", got, h.pid())
	}
	if got := children[h.pid()]; !slices.Contains(got, grandchild) {
		t.Errorf("children of the helper: %v; want its child %d", got, grandchild)
	}
}
