package presence

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// tempDir is t.TempDir, except on Windows. CI runs the Windows tests under
// Wine 8.0, whose NtSetInformationFile lacks FileDispositionInformationEx:
// Go's os.RemoveAll, and so t.TempDir's cleanup, fails there with
// "Invalid function" and fails the test. On Windows the directory is made
// with os.MkdirTemp and removed entry by entry with os.Remove (which Wine
// supports); what is left (a copied executable whose process Windows has
// not let go of yet) is logged, not a failure, since the test is over.
func tempDir(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "windows" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("", "presence-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeTree(dir); err != nil {
			t.Logf("temporary directory left behind: %v", err)
		}
	})
	return dir
}

// removeTree removes dir and everything in it, deepest first, and returns
// the first error.
func removeTree(dir string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			paths = append(paths, p)
		}
		return err
	})
	for i := len(paths) - 1; i >= 0; i-- {
		if e := os.Remove(paths[i]); e != nil && err == nil {
			err = e
		}
	}
	return err
}

func TestRemoveTree(t *testing.T) {
	dir, err := os.MkdirTemp("", "presence-removetree-")
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
	if err := removeTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("after removeTree: Stat(%s) = %v; want it gone", dir, err)
	}
}
