package gpu

import (
	"testing"
)

// An A1111 that restarts while LLM requests run loads its checkpoint on
// its own: once its watch sees it back, the turnstile takes the GPU (no
// further LLM request is admitted), frees A1111, and only then lets LLM
// use go on.
func TestImageEngineBackAfterARestartIsFreedBeforeMoreLLMUse(t *testing.T) {
	t.Parallel()
	f, srv := newA1111Fixture(t)
	if !f.g.lock.TryAcquireShared() {
		t.Fatal("no LLM place while idle")
	}
	srv.Kill()
	f.waitState(t, "A1111 seen down", func(st Status) bool {
		return st.Engines[0].Reachable != nil && !*st.Engines[0].Reachable
	})
	srv.Relaunch()
	f.waitState(t, "the GPU asked for A1111", func(st Status) bool { return st.ImageWaiting == 1 })
	if f.g.lock.TryAcquireShared() {
		t.Fatal("an LLM request was admitted beside A1111's checkpoint")
	}
	unloads := srv.Unloads()
	f.g.lock.ReleaseShared()
	f.waitState(t, "idle after the free", func(st Status) bool { return st.State == "idle" && st.Job == nil })
	if srv.Unloads() == unloads || srv.OnGPU() {
		t.Fatal("A1111 not freed before the GPU went back to LLM use")
	}
	if !f.g.lock.TryAcquireShared() {
		t.Fatal("LLM use not resumed after the free")
	}
	f.g.lock.ReleaseShared()
}
