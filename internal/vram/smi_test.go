package vram

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeSMI writes an nvidia-smi stand-in that prints the file "gpu" (with
// -lms, again and again until killed) or "compute", and logs its
// arguments to "args".
func fakeSMI(t *testing.T) (smi, dir string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the nvidia-smi stand-in is a shell script")
	}
	dir = t.TempDir()
	script := `#!/bin/sh
d="` + dir + `"
echo "$*" >> "$d/args"
[ -f "$d/fail" ] && { echo "NVIDIA-SMI has failed" >&2; exit 9; }
case "$*" in
*--query-compute-apps*) cat "$d/compute" ;;
*-lms*) while :; do cat "$d/gpu"; sleep 0.02; done ;;
*--query-gpu*) cat "$d/gpu" ;;
*) exit 9 ;;
esac
`
	smi = filepath.Join(dir, "nvidia-smi")
	write(t, smi, script)
	os.Chmod(smi, 0o755)
	return smi, dir
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func TestRead(t *testing.T) {
	smi, dir := fakeSMI(t)
	write(t, filepath.Join(dir, "gpu"), "GPU-1234, 24576, 20480\n")
	r, err := Read(context.Background(), smi, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.UUID != "GPU-1234" || r.Total != 24576<<20 || r.Free != 20480<<20 || r.At.IsZero() {
		t.Fatalf("reading %+v", r)
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if want := "--query-gpu=uuid,memory.total,memory.free -i 1 --format=csv,noheader,nounits\n"; string(args) != want {
		t.Fatalf("args %q, want %q", args, want)
	}
}

func TestReadRefusesWhatIsNoReading(t *testing.T) {
	smi, dir := fakeSMI(t)
	for _, out := range []string{"", "GPU-1, [N/A], 10\n", "GPU-1, 100, 200\n", "GPU-1, 0, 0\n", "No devices were found\n"} {
		write(t, filepath.Join(dir, "gpu"), out)
		if r, err := Read(context.Background(), smi, 0); err == nil {
			t.Errorf("%q: read %+v, want an error", out, r)
		}
	}
	write(t, filepath.Join(dir, "fail"), "")
	if _, err := Read(context.Background(), smi, 0); err == nil || !strings.Contains(err.Error(), "NVIDIA-SMI has failed") {
		t.Errorf("failing nvidia-smi: %v, want its message", err)
	}
	if _, err := Read(context.Background(), filepath.Join(dir, "missing"), 0); err == nil {
		t.Error("missing nvidia-smi: no error")
	}
}

func TestProcesses(t *testing.T) {
	smi, dir := fakeSMI(t)
	write(t, filepath.Join(dir, "compute"), "4242, 20480\n17, [N/A]\n4242, 1024\n")
	p, err := Processes(context.Background(), smi, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || p[4242] != 21504<<20 {
		t.Fatalf("processes %v", p)
	}
	write(t, filepath.Join(dir, "compute"), "")
	if p, err := Processes(context.Background(), smi, 0); err != nil || len(p) != 0 {
		t.Fatalf("no processes: %v %v", p, err)
	}
	write(t, filepath.Join(dir, "compute"), "python3, 12\n")
	if _, err := Processes(context.Background(), smi, 0); err == nil {
		t.Fatal("a line with no PID: no error")
	}
}

// One nvidia-smi gives reading after reading; one that dies is reported
// and started again; the stream ends with its context.
func TestStream(t *testing.T) {
	smi, dir := fakeSMI(t)
	gpu := filepath.Join(dir, "gpu")
	write(t, gpu, "GPU-1, 8192, 4096\n")
	ctx, cancel := context.WithCancel(context.Background())
	type got struct {
		r   Reading
		err error
	}
	ch := make(chan got, 100)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Stream(ctx, smi, 0, 20*time.Millisecond, func(r Reading, err error) {
			select {
			case ch <- got{r, err}:
			default:
			}
		})
	}()
	next := func() got {
		t.Helper()
		select {
		case g := <-ch:
			return g
		case <-time.After(10 * time.Second):
			t.Fatal("no reading")
		}
		return got{}
	}
	for range 2 {
		if g := next(); g.err != nil || g.r.Free != 4096<<20 {
			t.Fatalf("reading %+v %v", g.r, g.err)
		}
	}
	write(t, gpu, "garbage\n")
	for g := next(); g.err == nil; g = next() {
	}
	write(t, gpu, "GPU-1, 8192, 1024\n")
	for g := next(); g.err != nil || g.r.Free != 1024<<20; g = next() {
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stream did not return after its context ended")
	}
	args, _ := os.ReadFile(filepath.Join(dir, "args"))
	if n := strings.Count(string(args), "-lms 20"); n < 2 {
		t.Fatalf("nvidia-smi runs:\n%s\nwant it restarted after the garbage", args)
	}
}
