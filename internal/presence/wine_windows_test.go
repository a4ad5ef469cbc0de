package presence

import "syscall"

// underWine reports whether this Windows test runs under Wine (CI runs the
// Windows tests there), known by the wine_get_version that Wine's ntdll
// exports and Windows' does not.
func underWine() bool {
	return syscall.NewLazyDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil
}
