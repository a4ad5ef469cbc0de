package a1111test_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/a1111/a1111test"
)

func memory(t *testing.T, srv *a1111test.Server) (ram, cuda map[string]any) {
	t.Helper()
	m := getJSON(t, srv.URL()+"/sdapi/v1/memory")
	if got := keys(m); !slices.Equal(got, []string{"cuda", "ram"}) {
		t.Fatalf("memory keys %v", got)
	}
	return m["ram"].(map[string]any), m["cuda"].(map[string]any)
}

func figure(cuda map[string]any, group, key string) int64 {
	n, _ := cuda[group].(map[string]any)[key].(json.Number).Int64()
	return n
}

// GET /sdapi/v1/memory has the full shape: ram {free, used, total}, cuda
// {system, active, allocated, reserved, inactive, events}, in bytes, cuda's
// as integers.
func TestMemoryShape(t *testing.T) {
	t.Parallel()
	srv, _ := newFake(t, a1111test.Options{})
	ram, cuda := memory(t, srv)
	if got := keys(ram); !slices.Equal(got, []string{"free", "total", "used"}) {
		t.Fatalf("ram keys %v", got)
	}
	if got := keys(cuda); !slices.Equal(got, []string{"active", "allocated", "events", "inactive", "reserved", "system"}) {
		t.Fatalf("cuda keys %v", got)
	}
	want := map[string][]string{
		"system": {"free", "total", "used"}, "active": {"current", "peak"}, "allocated": {"current", "peak"},
		"reserved": {"current", "peak"}, "inactive": {"current", "peak"}, "events": {"oom", "retries"},
	}
	for group, ks := range want {
		g := cuda[group].(map[string]any)
		if got := keys(g); !slices.Equal(got, ks) {
			t.Fatalf("cuda.%s keys %v, want %v", group, got, ks)
		}
		for _, k := range ks {
			if s := g[k].(json.Number).String(); strings.ContainsAny(s, ".eE") {
				t.Fatalf("cuda.%s.%s = %s, not an integer", group, k, s)
			}
		}
	}
	if figure(cuda, "system", "free")+figure(cuda, "system", "used") != figure(cuda, "system", "total") {
		t.Fatalf("system %v: free + used != total", cuda["system"])
	}
}

// cuda.reserved.current is this process's own memory: it holds the
// checkpoint while that is on the GPU and falls after an unload.
// cuda.system covers the whole device: another process's memory lowers
// its free figure and leaves reserved alone.
func TestMemoryReservedIsOwnAndSystemIsTheWholeDevice(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{CheckpointBytes: 6 << 30})
	_, cuda := memory(t, srv)
	reserved, free := figure(cuda, "reserved", "current"), figure(cuda, "system", "free")
	if reserved < 6<<30 || reserved > 7<<30 {
		t.Fatalf("reserved %d with a 6 GiB checkpoint loaded", reserved)
	}
	release := gpu.Occupy("ollama", "load llama3.2:latest")
	_, cuda = memory(t, srv)
	if figure(cuda, "reserved", "current") != reserved || figure(cuda, "system", "free") >= free {
		t.Fatalf("with another process on the card: reserved %d (was %d), free %d (was %d)",
			figure(cuda, "reserved", "current"), reserved, figure(cuda, "system", "free"), free)
	}
	release("unload")
	post(t, srv.URL()+"/sdapi/v1/unload-checkpoint", "")
	_, cuda = memory(t, srv)
	if now := figure(cuda, "reserved", "current"); now > 512<<20 || figure(cuda, "reserved", "peak") < reserved {
		t.Fatalf("after unload: reserved %d, peak %d", now, figure(cuda, "reserved", "peak"))
	}
}

// Without CUDA, /memory answers cuda {"error":"unavailable"}. The fake
// still occupies the simulated GPU (MPS and DirectML are GPUs).
func TestNoCUDAMemory(t *testing.T) {
	t.Parallel()
	srv, gpu := newFake(t, a1111test.Options{NoCUDA: true})
	_, cuda := memory(t, srv)
	if len(cuda) != 1 || cuda["error"] != "unavailable" {
		t.Fatalf("cuda %v, want {\"error\":\"unavailable\"}", cuda)
	}
	if gpu.Users("a1111") != 1 {
		t.Fatal("no occupancy without CUDA")
	}
}
