package presence

import (
	"strings"
	"testing"

	"golang.org/x/sys/windows/registry"
)

// useSteamKey points steamKey at a key of the test's own under HKCU (a
// real Steam's value is left alone), and removes it at the end.
func useSteamKey(t *testing.T) registry.Key {
	t.Helper()
	old := steamKey
	parts := []string{`Software\caddy-gpu-turnstile-test`, t.Name(), `Valve`, `Steam`}
	steamKey = strings.Join(parts, `\`)
	t.Cleanup(func() {
		steamKey = old
		for i := len(parts); i > 0; i-- {
			registry.DeleteKey(registry.CURRENT_USER, strings.Join(parts[:i], `\`))
		}
	})
	k, _, err := registry.CreateKey(registry.CURRENT_USER, steamKey, registry.SET_VALUE|registry.QUERY_VALUE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

// RunningAppID, set here in HKCU through the registry package, is read
// back as Steam's running game: not 0 is a game, 0 or no value none.
func TestSteamRunningAppFromRegistry(t *testing.T) {
	k := useSteamKey(t)
	if id, err := steamRunningApp(""); id != "" || err != nil {
		t.Fatalf("no value: %q, %v", id, err)
	}
	if err := k.SetDWordValue("RunningAppID", 570); err != nil {
		t.Fatal(err)
	}
	if id, err := steamRunningApp(""); id != "570" || err != nil {
		t.Fatalf("RunningAppID 570: %q, %v", id, err)
	}
	if err := k.SetDWordValue("RunningAppID", 0); err != nil {
		t.Fatal(err)
	}
	if id, err := steamRunningApp(""); id != "" || err != nil {
		t.Fatalf("RunningAppID 0: %q, %v", id, err)
	}
}

// Without a Steam key in any hive, the condition is off and says so.
func TestSteamRegistryMissing(t *testing.T) {
	old := steamKey
	steamKey = `Software\caddy-gpu-turnstile-test\absent\Valve\Steam`
	defer func() { steamKey = old }()
	if _, err := steamRunningApp(""); !IsOff(err) || !strings.Contains(err.Error(), steamKey) {
		t.Fatalf("steamRunningApp() = %v, want off naming the key", err)
	}
}

// The users' hives are the S-1-5-21 ones, without their _Classes.
func TestUserHives(t *testing.T) {
	sids, err := userHives()
	if err != nil {
		t.Fatal(err)
	}
	if len(sids) == 0 {
		t.Fatal("no user hive under HKEY_USERS (this user's is loaded)")
	}
	for _, s := range sids {
		if !strings.HasPrefix(s, "S-1-5-21-") || strings.HasSuffix(s, "_Classes") {
			t.Errorf("hive %q", s)
		}
	}
}

// The condition needs steam.exe running as well as RunningAppID.
func TestSteamNeedsTheClient(t *testing.T) {
	k := useSteamKey(t)
	if err := k.SetDWordValue("RunningAppID", 1091500); err != nil {
		t.Fatal(err)
	}
	s, _ := Steam("")
	if _, present, err := sampleNow(t, s); present || err != nil {
		t.Fatalf("without steam.exe: %v, %v", present, err)
	}
	startHelper(t, copyExe(t, "steam"), "", "wait")
	if owner, present, err := sampleNow(t, s); owner != "steam:1091500" || !present || err != nil {
		t.Fatalf("with steam.exe: %q, %v, %v", owner, present, err)
	}
}
