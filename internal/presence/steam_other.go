//go:build !windows

package presence

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// steamRegistries are where Steam keeps registry.vdf under a home: the
// native client's, then Flatpak's.
func steamRegistries(home string) []string {
	return []string{
		filepath.Join(home, ".steam", "registry.vdf"),
		filepath.Join(home, ".var", "app", "com.valvesoftware.Steam", ".steam", "registry.vdf"),
	}
}

// steamRunningApp reads RunningAppID from the registry.vdf files under
// home ("" for this user's): the first that is set and not 0, else "".
func steamRunningApp(home string) (string, error) {
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", offf("no home directory to find Steam in (%v); give `home PATH`", err)
		}
		home = h
	}
	paths := steamRegistries(home)
	found := false
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("steam: %w", err)
		}
		found = true
		root, err := parseVDF(string(b))
		if err != nil {
			return "", fmt.Errorf("steam: %s: %w", p, err)
		}
		if id, _ := root.lookup("Registry", "HKCU", "Software", "Valve", "Steam", "RunningAppID"); id != "" && id != "0" {
			return id, nil
		}
	}
	if !found {
		return "", offf("no Steam registry.vdf at %s or %s (a service's HOME is not the player's: give `home PATH`)", paths[0], paths[1])
	}
	return "", nil
}
