package presence

import (
	"strconv"
	"testing"
	"time"
)

// sampleNow samples s once.
func sampleNow(t *testing.T, s Sampler) (string, bool, error) {
	t.Helper()
	return s.Sample(t.Context())
}

// pidsRecord is one process of `nvidia-smi -q -d PIDS`.
func pidsRecord(pid int, typ, name string) string {
	return "        GPU instance ID                   : N/A\n        Compute instance ID               : N/A\n" +
		"        Process ID                        : " + strconv.Itoa(pid) + "\n" +
		"            Type                          : " + typ + "\n" +
		"            Name                          : " + name + "\n" +
		"            Used GPU Memory               : 180 MiB\n"
}

// A desktop's graphics processes (Linux and Windows sessions) never hold
// the GPU under gpu_process unless include_desktop; except adds to them.
func TestGPUProcessesExceptTheDesktop(t *testing.T) {
	desktop := pidsHeader + pidsXorg +
		pidsRecord(1801, "G", "/usr/bin/gnome-shell") + pidsRecord(1802, "G", "/usr/bin/Xwayland") +
		pidsRecord(1803, "G", "/usr/bin/kwin_wayland") + pidsRecord(1804, "G", "/usr/bin/plasmashell") +
		pidsRecord(2101, "C+G", `C:\Windows\System32\dwm.exe`) + pidsRecord(2102, "C+G", `C:\Windows\explorer.exe`) +
		pidsRecord(2103, "C+G", `C:\Windows\SystemApps\ShellExperienceHost_cw5n1h2txyewy\ShellExperienceHost.exe`) +
		pidsRecord(2104, "C+G", `C:\Windows\SystemApps\MicrosoftWindows.Client.CBS_cw5n1h2txyewy\SearchHost.exe`)
	for _, tc := range []struct {
		name           string
		pids           string
		includeDesktop bool
		except         []string
		want           string
	}{
		{"the desktop alone", desktop, false, nil, ""},
		{"a game beside the desktop", desktop + pidsGame, false, nil, "gpu_process:Cyberpunk2077.exe (pid 9001)"},
		{"except adds to the desktop", desktop + pidsGame, false, []string{"cyberpunk*"}, ""},
		{"include_desktop", desktop, true, nil, "gpu_process:Xorg (pid 1742)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			smi, _ := fakeSMI(t, "", tc.pids, "")
			s, err := GPUProcesses(smi, 0, tc.except, tc.includeDesktop, nil)
			if err != nil {
				t.Fatal(err)
			}
			owner, present, err := sample(t, s, 10*time.Second)
			if err != nil || owner != tc.want || present != (tc.want != "") {
				t.Fatalf("Sample() = %q, %v, %v; want %q", owner, present, err, tc.want)
			}
		})
	}
}
