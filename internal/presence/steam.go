package presence

import (
	"context"
	"fmt"
)

// steamClient is the glob of Steam's client process: `steam` on Linux,
// steam.exe on Windows (a glob matches with or without ".exe").
// steamwebhelper is not needed: it runs only beside the client.
const steamClient = "steam"

// steamSampler is hold_while steam.
type steamSampler struct {
	home   string // Linux: whose registry.vdf; "" for the user Caddy runs as
	client Sampler
}

// Steam builds hold_while steam: Steam reports a running game (its
// RunningAppID is not 0) and Steam's client process runs, which RunningAppID
// outlives when Steam crashes. The owner is "steam:APPID".
//
// Where RunningAppID is read: on Windows in the registry, under
// Software\Valve\Steam of HKEY_CURRENT_USER and of every signed-in user's
// hive (HKEY_USERS\S-1-5-21-...), since a service's own HKCU is not the
// player's (home is not used); elsewhere in registry.vdf
// (Registry/HKCU/Software/Valve/Steam) under home's .steam, or under
// Flatpak's .var/app/com.valvesoftware.Steam/.steam, home being that of
// the user Caddy runs as when empty. Finding no Steam there turns the
// condition off (an [*OffError]), and the status says where it looked.
func Steam(home string) (Sampler, error) {
	client, err := Processes([]string{steamClient})
	if err != nil {
		return nil, err
	}
	return &steamSampler{home: home, client: client}, nil
}

func (s *steamSampler) String() string {
	if s.home != "" {
		return "steam home " + s.home
	}
	return "steam"
}

func (s *steamSampler) Sample(ctx context.Context) (string, bool, error) {
	id, err := steamRunningApp(s.home)
	if err != nil || id == "" || id == "0" {
		return "", false, err
	}
	_, running, err := s.client.Sample(ctx)
	if err != nil || !running {
		return "", false, err
	}
	return fmt.Sprintf("steam:%s", id), true, nil
}
