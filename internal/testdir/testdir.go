// Package testdir gives tests a temporary directory that Wine can remove.
//
// CI runs the Windows tests under Wine 8.0, whose NtSetInformationFile
// lacks FileDispositionInformationEx: Go's os.RemoveAll, and so
// t.TempDir's cleanup, fails there with "Invalid function" and fails the
// test.
package testdir

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// New is t.TempDir, except on Windows: there the directory is made with
// os.MkdirTemp and removed entry by entry with os.Remove (which Wine
// supports). What is left (a copied executable whose process Windows has
// not let go of yet) is logged, not a failure, since the test is over.
func New(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "windows" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("", "gpu-turnstile-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := RemoveTree(dir); err != nil {
			t.Logf("temporary directory left behind: %v", err)
		}
	})
	return dir
}

// RemoveTree removes dir and everything in it, deepest first, and returns
// the first error.
func RemoveTree(dir string) error {
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
