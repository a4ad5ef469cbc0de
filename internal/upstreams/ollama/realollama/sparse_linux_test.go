package realollama

import (
	"path/filepath"
	"syscall"
	"testing"
)

// The big model's zero weights are holes: written at once, no disk used.
func TestZeroWeightsAreSparse(t *testing.T) {
	m := Big
	m.Layers = 2
	f, err := m.Write(filepath.Join(t.TempDir(), "big.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.Path, &st); err != nil {
		t.Fatal(err)
	}
	if a := st.Blocks * 512; a > f.Size/10 {
		t.Errorf("%d of %d bytes allocated; want a sparse file", a, f.Size)
	}
}
