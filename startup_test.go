package turnstile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/certmagic"

	hstore "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/store"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/comfy/comfytest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/gputest"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/ollama/ollamatest"
)

func init() { caddy.RegisterModule(blockingStorage{}) }

// blockingStorage is a Caddy storage module for tests: Caddy's file
// storage, except that the first listing of one turnstile's saved holds
// blocks until the test lets it go (blockedStore).
type blockingStorage struct{}

// blockedStore is what blockingStorage hands Caddy; a test sets it up
// before it loads a config with `storage test_blocking_holds`.
var blockedStore struct {
	mu sync.Mutex
	s  *blockingStore
}

func (blockingStorage) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "caddy.storage.test_blocking_holds", New: func() caddy.Module { return new(blockingStorage) }}
}

func (*blockingStorage) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next()
	return nil
}

func (*blockingStorage) CertMagicStorage() (certmagic.Storage, error) {
	blockedStore.mu.Lock()
	defer blockedStore.mu.Unlock()
	return blockedStore.s, nil
}

type blockingStore struct {
	*certmagic.FileStorage
	turnstile string        // whose holds' first listing blocks
	listing   chan struct{} // closed as that listing begins
	release   chan struct{} // closed by the test to let it go on
	once      sync.Once
}

// List blocks the first listing of the turnstile's holds until release
// is closed, whatever ctx says: a store that does not answer.
func (s *blockingStore) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	if path.Base(prefix) == s.turnstile {
		first := false
		s.once.Do(func() { first = true })
		if first {
			close(s.listing)
			<-s.release
		}
	}
	return s.FileStorage.List(ctx, prefix, recursive)
}

// TestHoldStoreBlocksAtStartUp: the hold store does not answer its first
// read of gpu0's holds. The config loads at once, since the read runs on
// gpu0's own goroutine, not in the load; meanwhile /healthz answers, LLM
// requests for gpu1 are served, and those for gpu0 wait, held back by the
// start-up. Once the store answers, the hold it kept is restored before
// them, and they still wait. Caddy stops within its bound.
func TestHoldStoreBlocksAtStartUp(t *testing.T) {
	dir := t.TempDir()
	store := &blockingStore{FileStorage: &certmagic.FileStorage{Path: dir}, turnstile: "gpu0",
		listing: make(chan struct{}), release: make(chan struct{})}
	blockedStore.mu.Lock()
	blockedStore.s = store
	blockedStore.mu.Unlock()
	released := false
	release := func() {
		if !released {
			released = true
			close(store.release)
		}
	}
	defer release()

	expires := time.Now().Add(time.Minute)
	rec, _ := json.Marshal(hstore.HoldRecord{ID: "kept", Turnstile: "gpu0", Owner: "trainer", TTL: "1m", Since: time.Now(), ExpiresAt: expires})
	if err := store.Store(context.Background(), "gpu_turnstile/holds/gpu0/kept.json", rec); err != nil {
		t.Fatal(err)
	}

	gpu0, gpu1 := gputest.New(), gputest.New()
	o0, o1 := ollamatest.NewServer(gpu0, ollamatest.Options{}), ollamatest.NewServer(gpu1, ollamatest.Options{})
	c0 := comfytest.NewServer(gpu0, comfytest.Options{})
	defer func() {
		caddy.Stop()
		for _, s := range []interface{ Close() }{o0, o1, c0} {
			s.Close()
		}
	}()
	ports := []int{freePort(t), freePort(t), freePort(t), freePort(t)}
	cfg := fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	storage test_blocking_holds
	log {
		output discard
	}
	gpu_turnstile gpu0 {
		ollama %s
		comfy %s
		llm_wait_timeout 1m
	}
	gpu_turnstile gpu1 {
		ollama %s
	}
}
:%d {
	bind 127.0.0.1
	handle /healthz {
		gpu_turnstile_status gpu0
	}
	gpu_turnstile {
		turnstile gpu0
	}
	reverse_proxy %s
}
:%d {
	bind 127.0.0.1
	gpu_turnstile {
		turnstile gpu1
	}
	reverse_proxy %s
}
`, ports[0], o0.URL, c0.URL, o1.URL, ports[1], o0.URL, ports[2], o1.URL)
	start := time.Now()
	if err := loadCaddyfile(cfg); err != nil {
		t.Fatal(err)
	}
	select {
	case <-store.listing:
	case <-time.After(10 * time.Second):
		t.Fatal("gpu0's saved holds were never read")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the config took %v to load while the hold store did not answer", took)
	}
	llm0 := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	llm1 := fmt.Sprintf("http://127.0.0.1:%d", ports[2])
	h := &harness{t: t, client: newTestClient()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// /healthz answers, and says gpu0 is held for its start-up.
	r := h.do("GET", llm0+"/healthz", "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"state":"image"`) {
		t.Fatalf("healthz while the hold store does not answer: %d %v %.200s", r.status, r.err, r.body)
	}
	// gpu1 serves.
	if r := h.post(ctx, llm1+"/api/chat", chatBody("llama3.2", false)); r.status != http.StatusOK {
		t.Fatalf("LLM on gpu1 while gpu0's hold store does not answer: %d %v", r.status, r.err)
	}
	// gpu0's LLM requests wait.
	waiting := h.postAsync(context.Background(), llm0+"/api/chat", chatBody("llama3.2", false))
	waitTurnstile(t, "gpu0", "an LLM request waiting for the start-up", func(st Status) bool { return st.LLMWaiting == 1 }, nil)

	// The store answers: the kept hold is restored before the waiting
	// request, which waits on.
	release()
	st := waitTurnstile(t, "gpu0", "the hold restored", func(st Status) bool { return len(st.Holds) == 1 }, nil)
	if st.State != "hold" || st.Holds[0].ID != "kept" || st.LLMWaiting != 1 {
		t.Fatalf("after the store answered: state %s, holds %+v, %d waiting; want the hold kept, 1 waiting", st.State, st.Holds, st.LLMWaiting)
	}
	select {
	case r := <-waiting:
		t.Fatalf("gpu0's LLM request answered %d %v during the restored hold", r.status, r.err)
	default:
	}
	if n := o0.Requests(); n != 0 {
		t.Fatalf("gpu0's Ollama got %d requests before the restored hold ended", n)
	}

	// Caddy stops within its bound, and the waiting request is answered;
	// the hold stays saved for the next start.
	stopped := make(chan error, 1)
	go func() { stopped <- caddy.Stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Caddy did not stop within 10s")
	}
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("gpu0's waiting LLM request got no answer once Caddy stopped")
	}
	if keys, _ := store.FileStorage.List(context.Background(), "gpu_turnstile/holds/gpu0", false); len(keys) != 1 {
		t.Fatalf("saved holds after the stop: %v, want the kept one", keys)
	}
}
