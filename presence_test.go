package turnstile

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
)

// startGame runs a copy of sleep named like a game, and returns a func
// that ends it.
func startGame(t *testing.T, name string) (stop func()) {
	t.Helper()
	src, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep executable to pose as a game")
	}
	dst := filepath.Join(t.TempDir(), name)
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
	cmd := exec.Command(dst, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// A game starts: the GPU is held for it at the next sample (Ollama
// emptied, chats wait), and given back only once the game has been gone
// for hold_release_after.
func TestHoldWhileProcess(t *testing.T) {
	const releaseAfter = 400 * time.Millisecond
	h := newHarness(t, harnessOptions{settings: "hold_while process mygame* steam\n\t\tpresence_poll_interval 50ms\n\t\thold_release_after 400ms"})
	ctx := context.Background()
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d", r.status)
	}
	h.waitIdle()
	stop := startGame(t, "MyGame.x86_64")
	st := h.waitStatus("a presence hold", func(st Status) bool { return len(st.Holds) == 1 })
	if hs := st.Holds[0]; hs.Source != "presence" || !strings.HasPrefix(hs.Owner, "process:") {
		t.Fatalf("hold %+v, want source presence and a process owner", hs)
	}
	h.waitTimeline("Ollama emptied", func([]gputest.Event) bool { return h.gpu.Users("ollama") == 0 })
	chat := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("the chat waits", func(st Status) bool { return st.LLMWaiting == 1 })
	stop()
	gone := time.Now()
	if r := <-chat; r.status != 200 {
		t.Fatalf("chat after the game: %d %s", r.status, r.body)
	}
	if waited := time.Since(gone); waited < releaseAfter {
		t.Fatalf("the hold ended %v after the game, before hold_release_after (%v)", waited, releaseAfter)
	}
	if st := h.status(); len(st.Holds) != 0 || len(st.Presence) != 1 || st.Presence[0].Engaged {
		t.Fatalf("status after the game: holds %+v presence %+v", st.Holds, st.Presence)
	}
}

// Without nvidia-smi, hold_while gpu_process is off, and the status says
// so; nothing else changes.
func TestHoldWhileGPUProcessWithoutNvidiaSMI(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	h := newHarness(t, harnessOptions{settings: "hold_while gpu_process except Xorg"})
	st := h.status()
	if len(st.Presence) != 1 || !strings.Contains(st.Presence[0].Error, "nvidia-smi not found") {
		t.Fatalf("presence %+v, want gpu_process reported off for want of nvidia-smi", st.Presence)
	}
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d", r.status)
	}
}

// fakeSMI puts an nvidia-smi on PATH that prints what the files compute
// and pids in its directory hold, and returns that directory.
func fakeSMI(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	script := `#!/bin/sh
echo "$*" >> "` + dir + `/calls"
case "$*" in
*--query-compute-apps*) cat "` + dir + `/compute" 2>/dev/null ;;
*"-q -d PIDS"*) cat "` + dir + `/pids" 2>/dev/null ;;
*) exit 9 ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return dir
}

const smiPIDsHeader = "\n==============NVSMI LOG==============\n\nAttached GPUs                             : 1\nGPU 00000000:01:00.0\n    Processes\n"

func smiProcess(pid int, typ, name string) string {
	return "        GPU instance ID                   : N/A\n        Compute instance ID               : N/A\n" +
		"        Process ID                        : " + strconv.Itoa(pid) + "\n" +
		"            Type                          : " + typ + "\n" +
		"            Name                          : " + name + "\n" +
		"            Used GPU Memory               : 512 MiB\n"
}

// A process that nvidia-smi shows on the GPU, compute or graphics, holds
// it; the engines' own processes (here the fakes, in this test's process)
// and the desktop's (excepted by default) do not.
func TestHoldWhileGPUProcess(t *testing.T) {
	dir := fakeSMI(t)
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	own := strconv.Itoa(os.Getpid())
	write("compute", own+", /usr/bin/ollama, 4096\n")
	write("pids", smiPIDsHeader+smiProcess(os.Getpid(), "C", "/usr/bin/ollama")+smiProcess(1742, "G", "/usr/lib/xorg/Xorg")+
		smiProcess(1801, "G", "/usr/bin/gnome-shell"))
	h := newHarness(t, harnessOptions{settings: "hold_while gpu_process\n\t\tpresence_poll_interval 50ms\n\t\thold_release_after 200ms"})
	ctx := context.Background()
	// Samples that saw the engines' own process and Xorg, and judged them.
	calls := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, "calls"))
		return strings.Count(string(b), "-q -d PIDS")
	}
	h.waitStatus("two full samples", func(Status) bool { return calls() >= 2 })
	// The engines' own process and the desktop do not hold it.
	for range 3 {
		if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
			t.Fatalf("chat: %d", r.status)
		}
	}
	if st := h.status(); len(st.Holds) != 0 || len(st.Presence) != 1 || st.Presence[0].Error != "" {
		t.Fatalf("holds %+v presence %+v, want none engaged and no error", st.Holds, st.Presence)
	}
	for _, tc := range []struct{ what, compute, pids string }{
		{"a foreign compute process", own + ", /usr/bin/ollama, 4096\n31337, /usr/bin/python3, 8192\n", smiPIDsHeader},
		{"a game, a graphics process", "", smiPIDsHeader + smiProcess(9001, "G", `Z:\games\Game\Game.exe`)},
	} {
		write("compute", tc.compute)
		write("pids", tc.pids)
		st := h.waitStatus(tc.what+" holds the GPU", func(st Status) bool { return len(st.Holds) == 1 })
		if hs := st.Holds[0]; hs.Source != "presence" || !strings.HasPrefix(hs.Owner, "gpu_process:") {
			t.Fatalf("%s: hold %+v", tc.what, hs)
		}
		h.waitTimeline("Ollama emptied", func([]gputest.Event) bool { return h.gpu.Users("ollama") == 0 })
		write("compute", "")
		write("pids", smiPIDsHeader)
		h.waitStatus("the hold released", func(st Status) bool { return len(st.Holds) == 0 })
	}
}

// The person at the machine goes first: a presence hold that arrives while
// a job runs and two wait is granted when the running job ends, before
// the two; they run once the game is over.
func TestPresenceHoldGoesBeforeQueuedJobs(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "hold_while process mygame*\n\t\tpresence_poll_interval 50ms\n\t\thold_release_after 100ms",
		comfy: comfyOpts(time.Hour)})
	ctx := context.Background()
	h.waitIdle()
	promptID(t, h.post(ctx, h.image+"/prompt", promptBody(3_600_000)))
	var queued []<-chan result
	for i := range 2 {
		queued = append(queued, h.postAsync(ctx, h.image+"/prompt", promptBody(50)))
		h.waitStatus("image job queued", func(st Status) bool { return st.ImageWaiting == i+1 })
	}
	stop := startGame(t, "MyGame")
	h.waitStatus("the presence hold queued", func(st Status) bool { return st.HoldWaiting == 1 })
	h.interruptRunning(h.comfy.URL)
	st := h.waitStatus("the presence hold granted", func(st Status) bool { return st.State == "hold" && len(st.Holds) == 1 })
	if st.ImageWaiting != 2 || st.Holds[0].Source != "presence" || st.Holds[0].Owner != "process:MyGame" {
		t.Fatalf("status %+v, want the presence hold ahead of both queued jobs", st)
	}
	stop()
	for _, ch := range queued {
		promptID(t, <-ch)
	}
	h.waitIdle()
}

// A presence hold has no lease and ends when its condition clears: the
// hold routes neither renew nor end it (ended there, its watch would not
// take it again while the game runs).
func TestPresenceHoldNotEndedThroughTheHoldRoutes(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "hold_while process routegame*\n\t\tpresence_poll_interval 50ms\n\t\thold_release_after 400ms"})
	stop := startGame(t, "RouteGame.x86_64")
	defer stop()
	st := h.waitStatus("a presence hold", func(st Status) bool { return len(st.Holds) == 1 })
	id := st.Holds[0].ID
	for _, r := range []result{
		h.do("POST", h.admin+"/gpu_turnstile/holds/"+id+"/renew", ``),
		h.do("DELETE", h.admin+"/gpu_turnstile/holds/"+id, ``),
	} {
		if r.status != http.StatusConflict || !strings.Contains(r.body, "presence hold") {
			t.Fatalf("renew or delete of a presence hold: %d %s, want 409", r.status, r.body)
		}
	}
	if st := h.status(); st.State != "hold" || len(st.Holds) != 1 || !st.Holds[0].ExpiresAt.IsZero() {
		t.Fatalf("the presence hold changed: state %s holds %+v", st.State, st.Holds)
	}
}

// smiOnPath puts the simulated card's nvidia-smi first on PATH, before
// Caddy loads.
func smiOnPath(h *harness) {
	h.t.Setenv("PATH", filepath.Dir(h.gpu.FakeSMI(h.t.TempDir()))+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// gameNotHere is a pid no process of the test machine is likely to have.
const gameNotHere = 3999999

// gpu_busy through Caddy, read from the simulated card's nvidia-smi pmon:
// beside the engine's own process at 95% (the fakes', in this test's
// process) and a browser at 3%, a game at 60% holds the GPU (Ollama
// emptied, chats wait); it is let go once the game stops.
func TestHoldWhileGPUBusy(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "hold_while gpu_busy 20 for 1s\n\t\tpresence_poll_interval 50ms\n\t\thold_release_after 200ms",
		beforeLoad: smiOnPath})
	defer h.gpu.Busy("ollama", os.Getpid(), "C", 95)()
	defer h.gpu.Busy("firefox", gameNotHere-1, "C+G", 3)()
	ctx := context.Background()
	if r := h.post(ctx, h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d", r.status)
	}
	game := h.gpu.Busy("Game.exe", gameNotHere, "G", 60)
	st := h.waitStatus("a presence hold", func(st Status) bool { return len(st.Holds) == 1 })
	// Busiest first: had the engine's process counted, it would own it.
	if hs := st.Holds[0]; hs.Source != "presence" || hs.Owner != "gpu_busy:Game.exe (pid 3999999)" {
		t.Fatalf("hold %+v, want the game's", hs)
	}
	h.waitTimeline("Ollama emptied", func([]gputest.Event) bool { return h.gpu.Users("ollama") == 0 })
	chat := h.postAsync(ctx, h.llm+"/api/chat", chatBody("llama3.2", false))
	h.waitStatus("the chat waits", func(st Status) bool { return st.LLMWaiting == 1 })
	if st := h.status(); len(st.Presence) != 1 || !st.Presence[0].Engaged || st.Presence[0].Condition != "gpu_busy 20 for 1s" {
		t.Fatalf("presence %+v", st.Presence)
	}
	game()
	if r := <-chat; r.status != 200 {
		t.Fatalf("chat after the game: %d %s", r.status, r.body)
	}
	if st := h.status(); len(st.Holds) != 0 || st.Presence[0].Engaged || st.Presence[0].Error != "" {
		t.Fatalf("after the game: holds %+v presence %+v", st.Holds, st.Presence)
	}
}

// A card whose nvidia-smi pmon is not supported: gpu_busy is off, and the
// status says why in nvidia-smi's words; nothing else changes.
func TestHoldWhileGPUBusyUnsupported(t *testing.T) {
	h := newHarness(t, harnessOptions{settings: "hold_while gpu_busy\n\t\tpresence_poll_interval 50ms",
		beforeLoad: func(h *harness) { smiOnPath(h); h.gpu.SetPmonUnsupported(true) }})
	st := h.waitStatus("gpu_busy off", func(st Status) bool { return len(st.Presence) == 1 && st.Presence[0].Error != "" })
	if p := st.Presence[0]; p.Condition != "gpu_busy 20 for 10s" || !strings.HasPrefix(p.Error, "off: nvidia-smi pmon: Not supported on the device(s)") {
		t.Fatalf("presence %+v", p)
	}
	if r := h.post(context.Background(), h.llm+"/api/chat", chatBody("llama3.2", false)); r.status != 200 {
		t.Fatalf("chat: %d", r.status)
	}
}

// Steam's running game (registry.vdf under `home`, and a steam process)
// holds the GPU as steam:APPID until RunningAppID is 0 again.
func TestHoldWhileSteam(t *testing.T) {
	home := t.TempDir()
	vdf := filepath.Join(home, ".steam", "registry.vdf")
	if err := os.MkdirAll(filepath.Dir(vdf), 0o755); err != nil {
		t.Fatal(err)
	}
	running := func(id string) {
		text := "\"Registry\"\n{\n\t\"HKCU\"\n\t{\n\t\t\"Software\"\n\t\t{\n\t\t\t\"Valve\"\n\t\t\t{\n\t\t\t\t\"Steam\"\n\t\t\t\t{\n" +
			"\t\t\t\t\t\"RunningAppID\"\t\t\"" + id + "\"\n\t\t\t\t}\n\t\t\t}\n\t\t}\n\t}\n}\n"
		if err := os.WriteFile(vdf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	running("0")
	startGame(t, "steam")
	h := newHarness(t, harnessOptions{settings: "hold_while steam home " + home + "\n\t\tpresence_poll_interval 50ms\n\t\thold_release_after 200ms"})
	running("570")
	st := h.waitStatus("a presence hold", func(st Status) bool { return len(st.Holds) == 1 })
	if hs := st.Holds[0]; hs.Source != "presence" || hs.Owner != "steam:570" {
		t.Fatalf("hold %+v, want steam:570", hs)
	}
	running("0")
	h.waitStatus("the hold released", func(st Status) bool { return len(st.Holds) == 0 && st.State == "idle" })
}

// A reload keeps a condition's hold, and the new config's watch releases
// it once the condition clears, as the old one would have.
func TestPresenceHoldReleasedAfterReload(t *testing.T) {
	opts := harnessOptions{settings: "hold_while process mygame*\n\t\tpresence_poll_interval 50ms\n\t\thold_release_after 100ms"}
	h := newHarness(t, opts)
	h.waitIdle()
	stop := startGame(t, "MyGame.x86_64")
	id := h.waitStatus("a presence hold", func(st Status) bool { return len(st.Holds) == 1 }).Holds[0].ID
	h.load(h.caddyfile(opts))
	if st := h.status(); len(st.Holds) != 1 || st.Holds[0].ID != id {
		t.Fatalf("after the reload: holds %+v, want %s kept", st.Holds, id)
	}
	stop()
	h.waitStatus("the hold released once the game is gone", func(st Status) bool { return len(st.Holds) == 0 })
}
