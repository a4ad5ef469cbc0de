package presence

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/windows/registry"
)

// steamKey is where Steam keeps RunningAppID in a user's hive.
var steamKey = `Software\Valve\Steam`

// steamRunningApp reads RunningAppID (a DWORD) under steamKey of
// HKEY_CURRENT_USER and of every signed-in user's hive (HKEY_USERS
// S-1-5-21-..., which a service must read: its own HKCU is not the
// player's): the first that is not 0, else "". home is not used.
func steamRunningApp(string) (string, error) {
	id, found, err := runningAppID(registry.CURRENT_USER, steamKey)
	if err != nil || id != "" {
		return id, err
	}
	sids, err := userHives()
	if err != nil {
		return "", err
	}
	for _, sid := range sids {
		id, ok, err := runningAppID(registry.USERS, sid+`\`+steamKey)
		if err != nil || id != "" {
			return id, err
		}
		found = found || ok
	}
	if !found {
		return "", offf(`no Steam key (%s) in HKEY_CURRENT_USER or a signed-in user's hive`, steamKey)
	}
	return "", nil
}

// runningAppID reads RunningAppID under root\path: "" when 0 or absent;
// ok reports that the key exists.
func runningAppID(root registry.Key, path string) (id string, ok bool, err error) {
	k, err := registry.OpenKey(root, path, registry.QUERY_VALUE)
	if errors.Is(err, registry.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("steam: opening %s: %w", path, err)
	}
	defer k.Close()
	n, _, err := k.GetIntegerValue("RunningAppID")
	if errors.Is(err, registry.ErrNotExist) || (err == nil && n == 0) {
		return "", true, nil
	}
	if err != nil {
		return "", true, fmt.Errorf("steam: reading %s\\RunningAppID: %w", path, err)
	}
	return strconv.FormatUint(n, 10), true, nil
}

// userHives are the SIDs of the users' hives loaded under HKEY_USERS
// (S-1-5-21-..., their _Classes hives left out).
func userHives() ([]string, error) {
	k, err := registry.OpenKey(registry.USERS, "", registry.ENUMERATE_SUB_KEYS)
	if err != nil {
		return nil, fmt.Errorf("steam: opening HKEY_USERS: %w", err)
	}
	defer k.Close()
	names, err := k.ReadSubKeyNames(-1)
	if err != nil {
		return nil, fmt.Errorf("steam: listing HKEY_USERS: %w", err)
	}
	var sids []string
	for _, n := range names {
		if strings.HasPrefix(n, "S-1-5-21-") && !strings.HasSuffix(n, "_Classes") {
			sids = append(sids, n)
		}
	}
	return sids, nil
}
