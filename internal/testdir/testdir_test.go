package testdir

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRemoveTree(t *testing.T) {
	dir, err := os.MkdirTemp("", "removetree-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"top.txt", filepath.Join("a", "b", "deep.exe")} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("after RemoveTree: Stat(%s) = %v; want it gone", dir, err)
	}
}
