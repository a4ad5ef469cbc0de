package presence

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/testdir"
)

// Outputs as nvidia-smi prints them (engines-api.md section 5; the exact
// bytes of a real driver are unverified).
const (
	computeEngines = "4242, /usr/bin/python3, 20480\n5151, /opt/llama.cpp/llama-server, 8192\n"

	nvsmiLog = `
==============NVSMI LOG==============

Timestamp                                 : Tue Mar 10 21:14:03 2026
Driver Version                            : 570.124.04
CUDA Version                              : 12.8

Attached GPUs                             : 1
GPU 00000000:01:00.0
`
	pidsHeader = nvsmiLog + "    Processes\n"
	pidsXorg   = `        GPU instance ID                   : N/A
        Compute instance ID               : N/A
        Process ID                        : 1742
            Type                          : G
            Name                          : /usr/lib/xorg/Xorg
            Used GPU Memory               : 215 MiB
`
	pidsGame = `        GPU instance ID                   : N/A
        Compute instance ID               : N/A
        Process ID                        : 9001
            Type                          : C+G
            Name                          : Z:\games\Cyberpunk 2077\bin\x64\Cyberpunk2077.exe
            Used GPU Memory               : 6120 MiB
`
	pidsPython = `        GPU instance ID                   : N/A
        Compute instance ID               : N/A
        Process ID                        : 4242
            Type                          : C
            Name                          : /usr/bin/python3
            Used GPU Memory               : 20480 MiB
`
	pidsNone = nvsmiLog + "    Processes                             : None\n"
)

// fakeSMI writes an nvidia-smi stand-in that prints compute for
// --query-compute-apps and pids for -q -d PIDS, after running prelude (a
// shell line), and logs its arguments, one run a line, to the returned
// file.
func fakeSMI(t *testing.T, compute, pids, prelude string) (smi, argLog string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the nvidia-smi stand-in is a shell script")
	}
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "compute.txt"), []byte(compute), 0o644))
	must(os.WriteFile(filepath.Join(dir, "pids.txt"), []byte(pids), 0o644))
	argLog = filepath.Join(dir, "args.log")
	smi = filepath.Join(dir, "nvidia-smi")
	script := `#!/bin/sh
dir=$(dirname "$0")
echo "$*" >> "$dir/args.log"
` + prelude + `
case "$1" in
--query-compute-apps=*) cat "$dir/compute.txt" ;;
-q) cat "$dir/pids.txt" ;;
*) echo "unexpected arguments: $*" >&2; exit 2 ;;
esac
`
	must(os.WriteFile(smi, []byte(script), 0o755))
	return smi, argLog
}

func ownOf(pids ...int32) (func(context.Context) (map[int32]bool, error), *int) {
	n := 0
	return func(context.Context) (map[int32]bool, error) {
		n++
		m := make(map[int32]bool)
		for _, p := range pids {
			m[p] = true
		}
		return m, nil
	}, &n
}

func sample(t *testing.T, s Sampler, timeout time.Duration) (string, bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	return s.Sample(ctx)
}

func TestGPUProcesses(t *testing.T) {
	engines := []int32{4242, 5151}
	for _, tc := range []struct {
		name             string
		compute, pids    string
		except           []string
		own              []int32
		wantOwner        string
		wantPresent      bool
		wantOwnCalled    bool
		wantRunsPerQuery int // 1: both queries ran; 0: the compute query was enough
	}{{
		name:    "a foreign compute process",
		compute: computeEngines + "7777, /home/me/venv/bin/python, 3000\n",
		pids:    pidsHeader + pidsPython, own: engines,
		wantOwner: "gpu_process:python (pid 7777)", wantPresent: true, wantOwnCalled: true,
	}, {
		name:    "a graphics process (a game), not in the compute list",
		compute: computeEngines, pids: pidsHeader + pidsPython + pidsGame, own: engines,
		wantOwner: "gpu_process:Cyberpunk2077.exe (pid 9001)", wantPresent: true, wantOwnCalled: true, wantRunsPerQuery: 1,
	}, {
		name:    "the engines' own processes only",
		compute: computeEngines, pids: pidsHeader + pidsPython, own: engines,
		wantOwnCalled: true, wantRunsPerQuery: 1,
	}, {
		name:    "excepted by glob, case-insensitively, with or without .exe",
		compute: computeEngines, pids: pidsHeader + pidsXorg + pidsGame + pidsPython,
		except: []string{"xorg", "cyberpunk2077"}, own: engines,
		wantOwnCalled: true, wantRunsPerQuery: 1,
	}, {
		name:    "everything excepted: own() is called once, at the first sample",
		compute: "", pids: pidsHeader + pidsXorg, except: []string{"Xorg"},
		wantOwnCalled: true, wantRunsPerQuery: 1,
	}, {
		name:    "[N/A] used_memory (Windows WDDM, containers)",
		compute: "4242, /usr/bin/python3, [N/A]\n8080, C:\\Tools\\blender.exe, [N/A]\n",
		pids:    pidsNone, own: engines,
		wantOwner: "gpu_process:blender.exe (pid 8080)", wantPresent: true, wantOwnCalled: true,
	}, {
		name:    "a name with a comma",
		compute: "8080, /opt/My, Game/run, 12\n", pids: pidsNone,
		wantOwner: "gpu_process:run (pid 8080)", wantPresent: true, wantOwnCalled: true,
	}, {
		name:    "empty output: no process",
		compute: "", pids: pidsNone,
		wantOwnCalled: true, wantRunsPerQuery: 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			smi, argLog := fakeSMI(t, tc.compute, tc.pids, "")
			own, called := ownOf(tc.own...)
			s, err := GPUProcesses(smi, 1, tc.except, true, own)
			if err != nil {
				t.Fatal(err)
			}
			owner, present, err := sample(t, s, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if owner != tc.wantOwner || present != tc.wantPresent {
				t.Errorf("Sample() = %q, %v; want %q, %v", owner, present, tc.wantOwner, tc.wantPresent)
			}
			if (*called > 0) != tc.wantOwnCalled {
				t.Errorf("own() called %d times", *called)
			}
			args, err := os.ReadFile(argLog)
			if err != nil {
				t.Fatal(err)
			}
			want := "--query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits -i 1\n"
			if tc.wantRunsPerQuery == 1 {
				want += "-q -d PIDS -i 1\n"
			}
			if string(args) != want {
				t.Errorf("nvidia-smi runs:\n%s\nwant:\n%s", args, want)
			}
		})
	}
}

func TestGPUProcessesNoOwn(t *testing.T) {
	smi, _ := fakeSMI(t, computeEngines, pidsNone, "")
	s, err := GPUProcesses(smi, 0, nil, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if owner, present, err := sample(t, s, 10*time.Second); err != nil || !present || owner != "gpu_process:python3 (pid 4242)" {
		t.Fatalf("Sample() without own = %q, %v, %v", owner, present, err)
	}
}

func TestGPUProcessesErrors(t *testing.T) {
	t.Run("missing nvidia-smi", func(t *testing.T) {
		s, err := GPUProcesses(filepath.Join(testdir.New(t), "nvidia-smi"), 0, nil, true, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, present, err := sample(t, s, 10*time.Second); err == nil || present {
			t.Fatalf("Sample() = %v, %v; want an error", present, err)
		}
	})
	t.Run("failing nvidia-smi", func(t *testing.T) {
		smi, _ := fakeSMI(t, "", "", `echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9`)
		s, _ := GPUProcesses(smi, 0, nil, true, nil)
		_, present, err := sample(t, s, 10*time.Second)
		if err == nil || present || !strings.Contains(err.Error(), "couldn't communicate") || !strings.Contains(err.Error(), "exit status 9") {
			t.Fatalf("Sample() = %v, %v; want exit status 9 and nvidia-smi's message", present, err)
		}
	})
	t.Run("the second query failing", func(t *testing.T) {
		smi, _ := fakeSMI(t, "", "", `[ "$1" = -q ] && { echo "No devices were found"; exit 6; }`)
		s, _ := GPUProcesses(smi, 0, nil, true, nil)
		if _, present, err := sample(t, s, 10*time.Second); err == nil || present || !strings.Contains(err.Error(), "No devices") {
			t.Fatalf("Sample() = %v, %v; want an error", present, err)
		}
	})
	t.Run("unexpected output", func(t *testing.T) {
		for _, tc := range []struct{ compute, pids string }{
			{"pid, process_name, used_memory\n", pidsNone},
			{"", "Timestamp : now\n"},
			{"", pidsHeader + "        Process ID : [N/A]\n"},
		} {
			smi, _ := fakeSMI(t, tc.compute, tc.pids, "")
			s, _ := GPUProcesses(smi, 0, nil, true, nil)
			if _, present, err := sample(t, s, 10*time.Second); err == nil || present {
				t.Errorf("Sample() on %q / %q = %v, %v; want an error", tc.compute, tc.pids, present, err)
			}
		}
	})
	t.Run("own failing", func(t *testing.T) {
		smi, _ := fakeSMI(t, computeEngines, pidsNone, "")
		s, _ := GPUProcesses(smi, 0, nil, true, func(context.Context) (map[int32]bool, error) { return nil, errors.New("no rights") })
		if _, present, err := sample(t, s, 10*time.Second); err == nil || present {
			t.Fatalf("Sample() = %v, %v; want an error", present, err)
		}
	})
	t.Run("a hanging nvidia-smi is killed at the deadline", func(t *testing.T) {
		// Not exec: the shell's child keeps the output open after the
		// shell is killed, as a wrapper script's would.
		smi, _ := fakeSMI(t, "", "", "sleep 5")
		s, _ := GPUProcesses(smi, 0, nil, true, nil)
		start := time.Now()
		_, present, err := sample(t, s, 300*time.Millisecond)
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || present {
			t.Fatalf("Sample() = %v, %v; want a deadline error", present, err)
		}
		if took > 300*time.Millisecond+smiWaitDelay+time.Second {
			t.Fatalf("Sample() took %v past a 300ms deadline", took)
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		for _, tc := range []struct {
			smi    string
			index  int
			except []string
		}{{"", 0, nil}, {"nvidia-smi", -1, nil}, {"nvidia-smi", 0, []string{"["}}, {"nvidia-smi", 0, []string{"/usr/bin/X*"}}} {
			if _, err := GPUProcesses(tc.smi, tc.index, tc.except, false, nil); err == nil {
				t.Errorf("GPUProcesses(%q, %d, %q) accepted", tc.smi, tc.index, tc.except)
			}
		}
	})
}

func TestParsePIDs(t *testing.T) {
	procs, err := parsePIDs([]byte(pidsHeader + pidsXorg + pidsGame))
	if err != nil {
		t.Fatal(err)
	}
	want := []gpuProc{{1742, "/usr/lib/xorg/Xorg", "G"}, {9001, `Z:\games\Cyberpunk 2077\bin\x64\Cyberpunk2077.exe`, "C+G"}}
	if len(procs) != len(want) || procs[0] != want[0] || procs[1] != want[1] {
		t.Fatalf("parsePIDs = %+v, want %+v", procs, want)
	}
	procs, err = parsePIDs([]byte(pidsNone))
	if err != nil || len(procs) != 0 {
		t.Fatalf("parsePIDs(None) = %+v, %v", procs, err)
	}
}
