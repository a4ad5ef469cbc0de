package ollama_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"llama3.2":                "llama3.2:latest",
		"llama3.2:latest":         "llama3.2:latest",
		"qwen3:8b":                "qwen3:8b",
		"hf.co/org/model":         "hf.co/org/model:latest",
		"registry:5000/org/model": "registry:5000/org/model:latest",
		"registry:5000/org/m:q4":  "registry:5000/org/m:q4",
		" spaced ":                "spaced:latest",
		"":                        "",
	} {
		if got := ollama.NormalizeName(in); got != want {
			t.Errorf("NormalizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:11434", "ftp://x", "http://"} {
		if _, err := ollama.NewClient(u, nil); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
}

// withTwoModels is a fake Ollama with llama3.2 and qwen3:8b loaded, and a
// client of it.
func withTwoModels(t *testing.T) (*gputest.GPU, *ollamatest.Server, *ollama.Client) {
	t.Helper()
	gpu := gputest.New()
	srv := ollamatest.NewServer(gpu, ollamatest.Options{})
	t.Cleanup(srv.Close)
	c, err := ollama.NewClient(srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"llama3.2", "qwen3:8b"} {
		if err := c.Warm(context.Background(), m, ""); err != nil {
			t.Fatal(err)
		}
	}
	return gpu, srv, c
}

func TestWarmThenUnloadAll(t *testing.T) {
	gpu, srv, c := withTwoModels(t)
	ctx := context.Background()
	ps, err := c.PS(ctx)
	if err != nil || len(ps) != 2 {
		t.Fatalf("ps %v, %v; want 2 models", ps, err)
	}
	names, err := c.UnloadAll(ctx, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 {
		t.Fatalf("unloaded %v, want 2 models", names)
	}
	if got := srv.Loaded(); len(got) != 0 {
		t.Fatalf("still loaded after UnloadAll returned: %v", got)
	}
	if gpu.Users("ollama") != 0 {
		t.Fatal("fake still occupies the GPU")
	}
}

// UnloadAllBut unloads the models it is not told to keep, and leaves the
// kept one loaded.
func TestUnloadAllButKeepsWhatItIsTold(t *testing.T) {
	_, srv, c := withTwoModels(t)
	names, kept, err := c.UnloadAllBut(context.Background(), 100*time.Millisecond, func(name string) bool { return name == "qwen3:8b" })
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "llama3.2:latest" || len(kept) != 1 || kept[0] != "qwen3:8b" {
		t.Fatalf("unloaded %v, kept %v; want llama3.2:latest unloaded, qwen3:8b kept", names, kept)
	}
	if got := srv.Loaded(); len(got) != 1 || got[0] != "qwen3:8b" {
		t.Fatalf("loaded after UnloadAllBut: %v, want qwen3:8b", got)
	}
}

// A model to keep whose unload is already pending (early_unload asked for
// it while the requests drained) is not kept: it is unloaded with the
// rest.
func TestUnloadAllButDoesNotKeepAModelBeingUnloaded(t *testing.T) {
	_, srv, c := withTwoModels(t)
	ctx := context.Background()
	srv.SetUnloadStuck(true)
	if err := c.Unload(ctx, "qwen3:8b"); err != nil {
		t.Fatal(err)
	}
	srv.SetUnloadStuck(false)
	names, kept, err := c.UnloadAllBut(ctx, 20*time.Millisecond, func(name string) bool { return name == "qwen3:8b" })
	if err != nil || len(kept) != 0 || len(names) != 2 {
		t.Fatalf("unloaded %v, kept %v, %v; want both unloaded, none kept", names, kept, err)
	}
	if got := srv.Loaded(); len(got) != 0 {
		t.Fatalf("still loaded: %v", got)
	}
}

func TestUnloadAllTimesOutNamingTheModel(t *testing.T) {
	gpu := gputest.New()
	srv := ollamatest.NewServer(gpu, ollamatest.Options{})
	defer srv.Close()
	c, _ := ollama.NewClient(srv.URL, nil)
	if err := c.Warm(context.Background(), "llama3.2", ""); err != nil {
		t.Fatal(err)
	}
	srv.SetUnloadStuck(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.UnloadAll(ctx, 20*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "llama3.2:latest") {
		t.Fatalf("err %v, want a timeout naming llama3.2:latest", err)
	}
}

func TestPSErrorIsReported(t *testing.T) {
	srv := ollamatest.NewServer(gputest.New(), ollamatest.Options{})
	defer srv.Close()
	srv.SetPSStatus(http.StatusInternalServerError)
	c, _ := ollama.NewClient(srv.URL, nil)
	_, err := c.UnloadAll(context.Background(), time.Millisecond)
	var se *ollama.StatusError
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("err %v (%T), want a 500 status error", err, se)
	}
}

func TestUnloadOfUnknownModelIsNotAnError(t *testing.T) {
	srv := ollamatest.NewServer(gputest.New(), ollamatest.Options{})
	defer srv.Close()
	c, _ := ollama.NewClient(srv.URL, nil)
	if err := c.Unload(context.Background(), "no-such-model"); err != nil {
		t.Fatal(err)
	}
}
