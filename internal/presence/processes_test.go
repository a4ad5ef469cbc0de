package presence

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"
)

func TestProcesses(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exeSuffix := ""
	if runtime.GOOS == "windows" {
		exeSuffix = ".exe"
	}
	for _, tc := range []struct {
		name      string
		exe       string // copy the test binary under this name; "" runs it as it is
		argv0     string
		glob      string
		wantOwner string
	}{{
		name: "by executable name, case-insensitively",
		exe:  "MyGame.x86_64", glob: "mygame*",
		wantOwner: "process:MyGame.x86_64" + exeSuffix,
	}, {
		name: "a name longer than Linux's 15-byte comm",
		exe:  "SuperLongGameName-Win64-Shipping", glob: "*-Win64-Shipping",
		wantOwner: "process:SuperLongGameName-Win64-Shipping" + exeSuffix,
	}, {
		name: "by the command line's first argument, a Windows path, without .exe",
		exe:  "wine64-preloader", argv0: `C:\Games\Witcher3\bin\witcher3.exe`, glob: "Witcher3",
		wantOwner: "process:witcher3.exe",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Processes([]string{"no-such-program-*", tc.glob})
			if err != nil {
				t.Fatal(err)
			}
			if owner, present, err := sample(t, s, 30*time.Second); err != nil || present {
				t.Fatalf("before the start: Sample() = %q, %v, %v", owner, present, err)
			}
			exe := self
			if tc.exe != "" {
				exe = copyExe(t, tc.exe)
			}
			h := startHelper(t, exe, tc.argv0, "wait")
			if owner, present, err := sample(t, s, 30*time.Second); err != nil || !present || owner != tc.wantOwner {
				t.Fatalf("Sample() = %q, %v, %v; want %q", owner, present, err, tc.wantOwner)
			}
			h.stop()
			if owner, present, err := sample(t, s, 30*time.Second); err != nil || present {
				t.Fatalf("after the kill: Sample() = %q, %v, %v", owner, present, err)
			}
		})
	}
}

func TestProcessesBadGlobs(t *testing.T) {
	for _, globs := range [][]string{nil, {}, {"["}, {"steam", ""}, {"/usr/bin/steam"}} {
		if _, err := Processes(globs); err == nil {
			t.Errorf("Processes(%q) accepted", globs)
		}
	}
}

func TestProcessesCancelled(t *testing.T) {
	s, err := Processes([]string{"no-such-program"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, present, err := s.Sample(ctx); err == nil || present {
		t.Fatalf("Sample(cancelled) = %v, %v; want an error", present, err)
	}
}

func TestMatch(t *testing.T) {
	m, err := newMatcher([]string{"steam", "*Shipping", "game?.exe"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"steam":                     true,
		"Steam.exe":                 true,
		"/usr/bin/steam":            true,
		`C:\Steam\steam.exe`:        true,
		"/proc/exe/steam (deleted)": true,
		"steamwebhelper":            false,
		"Foo-Win64-Shipping":        true,
		"game1.exe":                 true,
		"game12.exe":                false,
		"":                          false,
	} {
		if _, got := m.match(name); got != want {
			t.Errorf("match(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestEnginePIDs(t *testing.T) {
	if underWine() {
		// Wine 8.0's socket table gives every socket the owning process
		// 0, so EnginePIDs rightly reports the listener as not visible.
		t.Skip("Wine reports no owner of a TCP socket; TestChildrenOfOnWindows covers the process tree")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, self, "", "listen")
	port, grandchild := h.listening(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ownPort := ln.Addr().(*net.TCPAddr).Port

	// An unused port: bind one and close it.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freePort := free.Addr().(*net.TCPAddr).Port
	free.Close()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := EnginePIDs(ctx, []int{port})
	if err != nil {
		t.Fatal(err)
	}
	if !got[h.pid()] || !got[grandchild] {
		t.Fatalf("EnginePIDs(helper's port) = %v; want the helper %d and its child %d", got, h.pid(), grandchild)
	}
	if got[int32(os.Getpid())] {
		t.Fatalf("EnginePIDs(helper's port) = %v includes the test process, the helper's parent", got)
	}

	got, err = EnginePIDs(ctx, []int{ownPort, freePort})
	if err != nil {
		t.Fatal(err)
	}
	// The test process listens; its descendants (the helper and its
	// child) are the engine's too.
	for _, pid := range []int32{int32(os.Getpid()), h.pid(), grandchild} {
		if !got[pid] {
			t.Errorf("EnginePIDs(own port) = %v; want %d in it", got, pid)
		}
	}

	got, err = EnginePIDs(ctx, []int{freePort})
	if err != nil || len(got) != 0 {
		t.Fatalf("EnginePIDs(a port nothing listens on) = %v, %v", got, err)
	}
	got, err = EnginePIDs(ctx, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("EnginePIDs(nil) = %v, %v", got, err)
	}
}
