//go:build !windows

package presence

// underWine is false off Windows; see wine_windows_test.go.
func underWine() bool { return false }
