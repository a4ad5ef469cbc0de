package presence

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/testdir"
)

// What nvidia-smi -q -d PIDS prints on Windows: CRLF line ends, Windows
// paths, the desktop's compositor and a game as graphics (C+G) processes,
// and no memory figures under WDDM.
const (
	winPIDsHeader = "\n==============NVSMI LOG==============\n\nDriver Version : 572.16\n\nAttached GPUs : 1\nGPU 00000000:01:00.0\n    Processes\n"
	winDWM        = "        Process ID : 1312\n            Type : C+G\n            Name : C:\\Windows\\System32\\dwm.exe\n            Used GPU Memory : Not available in WDDM driver model\n"
	winGame       = "        Process ID : 9001\n            Type : C+G\n            Name : C:\\Games\\Cyberpunk 2077\\bin\\x64\\Cyberpunk2077.exe\n            Used GPU Memory : Not available in WDDM driver model\n"
)

// On Windows, nvidia-smi is found through PATH and PATHEXT (the driver
// installs nvidia-smi.exe in System32) and prints CRLF lines:
// LocateGPUProcesses finds a stand-in (a batch file) that way, reads
// both of its queries, leaves the desktop's dwm.exe out and sees a game.
func TestLocateGPUProcessesOnWindows(t *testing.T) {
	dir := testdir.New(t)
	crlf := func(s string) []byte { return []byte(strings.ReplaceAll(s, "\n", "\r\n")) }
	write := func(name string, b []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("nvidia-smi.bat", crlf("@echo off\nif \"%1\"==\"-q\" (type \"%~dp0pids.txt\") else (type \"%~dp0compute.txt\")\n"))
	write("compute.txt", nil)
	write("pids.txt", crlf(winPIDsHeader+winDWM))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))

	s, err := LocateGPUProcesses(0, nil, false, nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if owner, present, err := sample(t, s, 30*time.Second); err != nil || present {
		t.Fatalf("the desktop only: Sample() = %q, %v, %v; want nothing", owner, present, err)
	}
	write("pids.txt", crlf(winPIDsHeader+winDWM+winGame))
	owner, present, err := sample(t, s, 30*time.Second)
	if err != nil || !present || owner != "gpu_process:Cyberpunk2077.exe (pid 9001)" {
		t.Fatalf("with a game: Sample() = %q, %v, %v; want gpu_process:Cyberpunk2077.exe (pid 9001)", owner, present, err)
	}
}
