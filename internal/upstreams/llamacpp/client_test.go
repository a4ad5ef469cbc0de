package llamacpp_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/llamacpp/llamacpptest"
)

const (
	qwen  = "qwen3-8b"
	gemma = "gemma-3-4b"
)

func newFake(t *testing.T, opts llamacpptest.Options) (*llamacpptest.Server, *llamacpp.Client, *gputest.GPU) {
	t.Helper()
	gpu := gputest.New()
	srv := llamacpptest.NewServer(gpu, opts)
	t.Cleanup(srv.Close)
	c, err := llamacpp.NewClient(srv.URL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, gpu
}

// bounded is a context for calls that must not hang a failing test.
func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitStatus(t *testing.T, srv *llamacpptest.Server, gpu *gputest.GPU, model, status string) {
	t.Helper()
	if !gpu.WaitFor(10*time.Second, func([]gputest.Event) bool { return srv.Status(model) == status }) {
		t.Fatalf("%s is %q, want %q:\n%s", model, srv.Status(model), status, gputest.Dump(gpu.Events()))
	}
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://x", "http://"} {
		if _, err := llamacpp.NewClient(u, nil); err == nil {
			t.Errorf("NewClient(%q) accepted", u)
		}
	}
}

func TestRunning(t *testing.T) {
	t.Parallel()
	models := []llamacpp.Model{
		{ID: "a", Status: llamacpp.Loaded}, {ID: "b", Status: llamacpp.Unloaded}, {ID: "c", Status: llamacpp.Loading},
		{ID: "d", Status: llamacpp.Sleeping}, {ID: "e", Status: llamacpp.Downloading}, {ID: "f", Status: llamacpp.Downloaded},
		{ID: "g", Status: llamacpp.Unloaded, Failed: true, ExitCode: 1}, {ID: "h"}, {ID: "i", Status: "migrating"},
	}
	// A model downloading can be unloaded, and would load once its
	// download ends; a status this client does not know counts too.
	if got := llamacpp.Running(models); !slices.Equal(got, []string{"a", "c", "d", "e", "i"}) {
		t.Fatalf("Running = %v, want a, c, d, e, i", got)
	}
}

func TestRouterTellsTheModes(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	_, router, _ := newFake(t, llamacpptest.Options{})
	if ok, err := router.Router(ctx); !ok || err != nil {
		t.Errorf("router: %v, %v", ok, err)
	}
	srv, single, gpu := newFake(t, llamacpptest.Options{Single: qwen})
	waitStatus(t, srv, gpu, qwen, llamacpp.Loaded)
	if ok, err := single.Router(ctx); ok || err != nil {
		t.Errorf("single-model server: %v, %v; want false, nil", ok, err)
	}
	_, loading, _ := newFake(t, llamacpptest.Options{Single: qwen, LoadDelay: time.Hour})
	ok, err := loading.Router(ctx)
	var se *llamacpp.StatusError
	if ok || !errors.Is(err, llamacpp.ErrLoading) || !errors.As(err, &se) || se.Status != 503 {
		t.Errorf("loading single-model server: %v, %v; want false and ErrLoading with the 503", ok, err)
	}
}

func TestPropsShowsSleep(t *testing.T) {
	t.Parallel()
	srv, c, gpu := newFake(t, llamacpptest.Options{Single: qwen, SleepIdle: 30 * time.Millisecond})
	waitStatus(t, srv, gpu, qwen, llamacpp.Sleeping)
	p, err := c.Props(context.Background())
	if err != nil || p.Role != "" || !p.IsSleeping {
		t.Fatalf("Props = %+v, %v; want no role, sleeping", p, err)
	}
	if srv.Status(qwen) != llamacpp.Sleeping {
		t.Fatal("Props woke the model")
	}
}

func TestLoadAndUnloadAnswers(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	srv, c, gpu := newFake(t, llamacpptest.Options{})
	if err := c.Load(ctx, qwen); err != nil {
		t.Fatal(err)
	}
	if err := c.Load(ctx, qwen); err != nil {
		t.Fatalf("Load of a running model: %v, want nil", err)
	}
	waitStatus(t, srv, gpu, qwen, llamacpp.Loaded)
	if err := c.Unload(ctx, qwen); err != nil {
		t.Fatal(err)
	}
	if err := c.Unload(ctx, gemma); !errors.Is(err, llamacpp.ErrNotRunning) {
		t.Fatalf("Unload of a model not running: %v, want ErrNotRunning", err)
	}
	var se *llamacpp.StatusError
	if err := c.Unload(ctx, "nope"); !errors.As(err, &se) || se.Status != 400 || se.Message != "model is not found" {
		t.Fatalf("Unload of an unknown model: %v, want a 400 with the envelope's message", err)
	}
	if err := c.Load(ctx, "nope"); !errors.As(err, &se) || se.Status != 404 || se.Message != "model is not found" {
		t.Fatalf("Load of an unknown model: %v, want a 404 with the envelope's message", err)
	}
	waitStatus(t, srv, gpu, qwen, llamacpp.Unloaded)
}

func TestLoadAndUnloadOnASingleModelServer(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	srv, c, gpu := newFake(t, llamacpptest.Options{Single: qwen})
	waitStatus(t, srv, gpu, qwen, llamacpp.Loaded)
	if err := c.Load(ctx, qwen); !errors.Is(err, llamacpp.ErrSingleModel) {
		t.Errorf("Load: %v, want ErrSingleModel", err)
	}
	if err := c.Unload(ctx, qwen); !errors.Is(err, llamacpp.ErrSingleModel) {
		t.Errorf("Unload: %v, want ErrSingleModel", err)
	}
	if _, err := c.UnloadAll(ctx, 10*time.Millisecond); !errors.Is(err, llamacpp.ErrSingleModel) {
		t.Errorf("UnloadAll: %v, want ErrSingleModel", err)
	}
	_, loading, _ := newFake(t, llamacpptest.Options{Single: qwen, LoadDelay: time.Hour})
	if _, err := loading.UnloadAll(ctx, 10*time.Millisecond); !errors.Is(err, llamacpp.ErrSingleModel) || !errors.Is(err, llamacpp.ErrLoading) {
		t.Errorf("UnloadAll while loading: %v, want ErrSingleModel and ErrLoading", err)
	}
}

func TestModelsReportsAFailedLoad(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	srv, c, gpu := newFake(t, llamacpptest.Options{})
	srv.FailNextLoad(qwen)
	if err := c.Load(ctx, qwen); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, srv, gpu, qwen, llamacpp.Unloaded)
	models, err := c.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(models, func(m llamacpp.Model) bool { return m.ID == qwen })
	if i < 0 || models[i] != (llamacpp.Model{ID: qwen, Status: llamacpp.Unloaded, Failed: true, ExitCode: 1}) {
		t.Fatalf("Models = %+v", models)
	}
}

// UnloadAll returns once every child has exited: the GPU is free then,
// though each unload was answered while its child still ran.
func TestUnloadAllWaitsForEveryChildToExit(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	srv, c, gpu := newFake(t, llamacpptest.Options{StopDelay: 100 * time.Millisecond})
	for _, m := range []string{qwen, gemma} {
		if err := c.Load(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus(t, srv, gpu, qwen, llamacpp.Loaded)
	waitStatus(t, srv, gpu, gemma, llamacpp.Loaded)
	names, err := c.UnloadAll(ctx, 20*time.Millisecond)
	if err != nil || !slices.Equal(names, []string{gemma, qwen}) {
		t.Fatalf("UnloadAll = %v, %v; want both", names, err)
	}
	if gpu.Users("llamacpp") != 0 || srv.Status(qwen) != llamacpp.Unloaded || srv.Status(gemma) != llamacpp.Unloaded {
		t.Fatalf("UnloadAll returned with the GPU held:\n%s", gputest.Dump(gpu.Events()))
	}
	if names, err := c.UnloadAll(ctx, 20*time.Millisecond); err != nil || len(names) != 0 {
		t.Fatalf("UnloadAll of nothing = %v, %v", names, err)
	}
}

// A sleeping model still has a child, and a loading one is killed (it
// turns unloaded with failed:true, which counts as unloaded).
func TestUnloadAllEmptiesSleepingAndLoadingModels(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	srv, c, gpu := newFake(t, llamacpptest.Options{LoadDelay: 300 * time.Millisecond, SleepIdle: 30 * time.Millisecond})
	c.Load(ctx, qwen)
	waitStatus(t, srv, gpu, qwen, llamacpp.Sleeping)
	c.Load(ctx, gemma) // loading for 300ms
	names, err := c.UnloadAll(ctx, 20*time.Millisecond)
	if err != nil || !slices.Equal(names, []string{gemma, qwen}) {
		t.Fatalf("UnloadAll = %v, %v", names, err)
	}
	models, _ := c.Models(ctx)
	want := []llamacpp.Model{{ID: gemma, Status: llamacpp.Unloaded, Failed: true, ExitCode: 1}, {ID: qwen, Status: llamacpp.Unloaded}}
	if !slices.Equal(models, want) || gpu.Users("llamacpp") != 0 {
		t.Fatalf("after UnloadAll: %+v, want %+v:\n%s", models, want, gputest.Dump(gpu.Events()))
	}
}

// A model loaded while UnloadAll polls (a request that bypassed the
// turnstile) is unloaded too before UnloadAll returns.
func TestUnloadAllUnloadsAModelThatStartsMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	srv, c, gpu := newFake(t, llamacpptest.Options{StopDelay: 300 * time.Millisecond})
	c.Load(ctx, qwen)
	waitStatus(t, srv, gpu, qwen, llamacpp.Loaded)
	go func() {
		if !gpu.WaitFor(10*time.Second, func(ev []gputest.Event) bool { return gputest.Index(ev, 0, "llamacpp", "unload requested "+qwen) >= 0 }) {
			return
		}
		c.Load(ctx, gemma)
	}()
	names, err := c.UnloadAll(ctx, 10*time.Millisecond)
	if err != nil || !slices.Equal(names, []string{qwen, gemma}) {
		t.Fatalf("UnloadAll = %v, %v; want qwen, then gemma that started meanwhile:\n%s", names, err, gputest.Dump(gpu.Events()))
	}
	if gpu.Users("llamacpp") != 0 {
		t.Fatalf("UnloadAll returned with the GPU held:\n%s", gputest.Dump(gpu.Events()))
	}
}

func TestUnloadAllTimesOutNamingTheModelsAndStates(t *testing.T) {
	t.Parallel()
	ctx := bounded(t)
	srv, c, gpu := newFake(t, llamacpptest.Options{StopDelay: time.Hour})
	c.Load(ctx, qwen)
	waitStatus(t, srv, gpu, qwen, llamacpp.Loaded)
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := c.UnloadAll(ctx, 20*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), qwen+" (loaded)") {
		t.Fatalf("err %v, want a deadline naming %s (loaded)", err, qwen)
	}
}

func TestStatusErrorsCarryTheEnvelopesMessage(t *testing.T) {
	t.Parallel()
	_, c, _ := newFake(t, llamacpptest.Options{})
	err := c.Load(context.Background(), "")
	var se *llamacpp.StatusError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound || se.Message != "model is not found" ||
		err.Error() != "llama.cpp answered 404: model is not found" {
		t.Fatalf("err %v", err)
	}
}
