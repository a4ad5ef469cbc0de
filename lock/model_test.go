package lock

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const modelFile = "model/turnstile.pml"

// observers are the Lock methods that read and change nothing; every other
// method must have an inline of the same name in the model.
var observers = map[string]bool{"Snapshot": true, "State": true, "OwesFree": true, "View": true}

// TestModelMatchesCode keeps the Promela model in step with the Go code:
// the same states in the same order, one exclusive requester per Kind, and
// one inline per Lock method that changes the lock.
func TestModelMatchesCode(t *testing.T) {
	src, err := os.ReadFile(modelFile)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^mtype = \{([^}]*)\}`).FindSubmatch(src)
	if m == nil {
		t.Fatal("the model declares no mtype of states")
	}
	var modelStates []string
	for _, s := range strings.Split(string(m[1]), ",") {
		modelStates = append(modelStates, strings.TrimSpace(s))
	}
	var codeStates []string
	for _, s := range States {
		codeStates = append(codeStates, s.String())
	}
	if !reflect.DeepEqual(modelStates, codeStates) {
		t.Errorf("model states %v, code states %v", modelStates, codeStates)
	}
	var modelKinds []string
	for _, m := range regexp.MustCompile(`(?m)^#define (\w+)_req\b`).FindAllSubmatch(src, -1) {
		modelKinds = append(modelKinds, string(m[1]))
	}
	var codeKinds []string
	for k := range Kind(255) {
		if k.valid() {
			codeKinds = append(codeKinds, k.String())
		}
	}
	if !reflect.DeepEqual(modelKinds, codeKinds) {
		t.Errorf("model requesters %v, code kinds %v", modelKinds, codeKinds)
	}
	inlines := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^inline (\w+)\(`).FindAllSubmatch(src, -1) {
		inlines[string(m[1])] = true
	}
	typ := reflect.TypeOf(&Lock{})
	for i := range typ.NumMethod() {
		name := typ.Method(i).Name
		if !observers[name] && !inlines[name] {
			t.Errorf("Lock.%s changes the lock but the model has no inline %s", name, name)
		}
	}
}

// spinRun is one verification of the model.
type spinRun struct {
	name    string
	defines []string // -D switches for spin
	claim   string   // the LTL property, or "" for deadlocks and assertions only
	live    bool     // an acceptance-cycle search under weak fairness
	fail    bool     // a seeded bug or a known limit: spin must find a counterexample
}

var spinRuns = []spinRun{
	// Safety: the GPU is never shared, LLM holders never meet an exclusive
	// holder (assertions add: never two exclusive holders).
	{name: "safe, 1 LLM, endless", defines: []string{"-DNLLM=1"}, claim: "safe"},
	{name: "safe, 1 LLM, endless, max_image_streak 1", defines: []string{"-DNLLM=1", "-DMAX_STREAK=1"}, claim: "safe"},
	{name: "safe, 2 LLM, one round each", defines: []string{"-DFINITE", "-DROUNDS=1"}, claim: "safe"},
	{name: "safe, 2 LLM, one round each, max_image_streak 1", defines: []string{"-DFINITE", "-DROUNDS=1", "-DMAX_STREAK=1"}, claim: "safe"},
	// No deadlock, and back to idle once every requester is gone.
	{name: "no deadlock, idle at the end", defines: []string{"-DFINITE", "-DROUNDS=1"}},
	{name: "no deadlock, idle at the end, max_image_streak 1", defines: []string{"-DFINITE", "-DROUNDS=1", "-DMAX_STREAK=1"}},
	// Liveness under weak fairness.
	{name: "image requester served", defines: []string{"-DNLLM=1", "-DLIVE"}, claim: "exclLive", live: true},
	{name: "LLM request served, max_image_streak 1", defines: []string{"-DNLLM=1", "-DLIVE", "-DMAX_STREAK=1"}, claim: "llmLive", live: true},
	{name: "LLM request served, max_image_streak 2", defines: []string{"-DNLLM=1", "-DLIVE", "-DMAX_STREAK=2"}, claim: "llmLive", live: true},
	{name: "bounded starvation, max_image_streak 2", defines: []string{"-DNLLM=1", "-DMAX_STREAK=2"}, claim: "bounded"},
	// Strict image priority (the default) can starve LLM requests: the
	// reason max_image_streak exists.
	{name: "LLM request starved under strict priority", defines: []string{"-DNLLM=1", "-DLIVE"}, claim: "llmLive", live: true, fail: true},
	// Presence holds in the mix: a third requester making one presence
	// request (three endless exclusive requesters are too many states), or
	// the hold requester asking for presence holds, endlessly.
	{name: "safe, presence, 1 LLM, one round each, max_image_streak 1", defines: []string{"-DFINITE", "-DROUNDS=1", "-DNLLM=1", "-DPRESENCE=1", "-DMAX_STREAK=1"}, claim: "safe"},
	{name: "no deadlock, idle at the end, presence, 1 LLM, max_image_streak 1", defines: []string{"-DFINITE", "-DROUNDS=1", "-DNLLM=1", "-DPRESENCE=1", "-DMAX_STREAK=1"}},
	{name: "presence first, 1 LLM, one round each, max_image_streak 1", defines: []string{"-DFINITE", "-DROUNDS=1", "-DNLLM=1", "-DPRESENCE=1", "-DMAX_STREAK=1"}, claim: "presenceFirst"},
	{name: "image requester served, presence", defines: []string{"-DNLLM=1", "-DLIVE", "-DHOLD_IS_PRESENCE"}, claim: "exclLive", live: true},
	{name: "LLM request served, presence, max_image_streak 1", defines: []string{"-DNLLM=1", "-DLIVE", "-DMAX_STREAK=1", "-DHOLD_IS_PRESENCE"}, claim: "llmLive", live: true},
	{name: "bounded starvation, presence, max_image_streak 1", defines: []string{"-DNLLM=1", "-DMAX_STREAK=1", "-DHOLD_IS_PRESENCE"}, claim: "bounded"},
	// Co-residency: LLM requests may also run beside an image job whose
	// workflow is measured; never beside a hold, never over-committed.
	{name: "safe, beside, 1 LLM, endless", defines: []string{"-DNLLM=1", "-DBESIDE"}, claim: "safe"},
	{name: "safe, beside, 2 LLM, one round each", defines: []string{"-DFINITE", "-DROUNDS=1", "-DBESIDE"}, claim: "safe"},
	{name: "no deadlock, idle at the end, beside", defines: []string{"-DFINITE", "-DROUNDS=1", "-DBESIDE"}},
	{name: "safe, beside, presence, 1 LLM, one round each", defines: []string{"-DFINITE", "-DROUNDS=1", "-DNLLM=1", "-DPRESENCE=1", "-DBESIDE"}, claim: "safe"},
	{name: "image requester served, beside", defines: []string{"-DNLLM=1", "-DLIVE", "-DBESIDE"}, claim: "exclLive", live: true},
	// The bugs the design warns about: each must be caught.
	{name: "bug: lock released when /prompt answers", defines: []string{"-DFINITE", "-DROUNDS=1", "-DBUG_RELEASE_ON_PROMPT"}, claim: "safe", fail: true},
	{name: "bug: hand-over forgets the free it owes", defines: []string{"-DFINITE", "-DROUNDS=1", "-DBUG_SKIP_DEBT"}, claim: "safe", fail: true},
	{name: "bug: warm-up outside the lock races the unload", defines: []string{"-DFINITE", "-DROUNDS=1", "-DBUG_WARM_UNLOCKED"}, claim: "safe", fail: true},
	{name: "bug: presence hold queued at the back", defines: []string{"-DFINITE", "-DROUNDS=1", "-DNLLM=1", "-DPRESENCE=1", "-DBUG_PRESENCE_BACK"}, claim: "presenceFirst", fail: true},
	{name: "bug: the room beside a job judged before the lock's step", defines: []string{"-DNLLM=1", "-DBESIDE", "-DBUG_BESIDE_STALE"}, claim: "safe", fail: true},
	{name: "bug: a model kept through a job whose workflow was never measured", defines: []string{"-DNLLM=1", "-DBESIDE", "-DBUG_KEEP_UNMEASURED"}, claim: "safe", fail: true},
	{name: "bug: presence hold waits for the shared turn", defines: []string{"-DFINITE", "-DROUNDS=1", "-DNLLM=1", "-DPRESENCE=1", "-DMAX_STREAK=1", "-DBUG_PRESENCE_TURN"}, fail: true},
}

// TestModelCheck verifies the lock's protocol exhaustively with spin (the
// Debian package spin, and a C compiler). It skips when they are missing.
func TestModelCheck(t *testing.T) {
	spin, err := exec.LookPath("spin")
	if err != nil {
		t.Skip("spin not installed (Debian package spin); .ci/run installs it")
	}
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to build spin's verifier")
	}
	if testing.Short() {
		t.Skip("model checking takes a minute or two")
	}
	model, err := os.ReadFile(modelFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range spinRuns {
		t.Run(run.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "turnstile.pml"), model, 0o644); err != nil {
				t.Fatal(err)
			}
			sh := func(name string, args ...string) string {
				t.Helper()
				cmd := exec.Command(name, args...)
				cmd.Dir = dir
				out, err := cmd.CombinedOutput()
				if err != nil && name != "./pan" {
					t.Fatalf("%s %v: %v\n%s", name, args, err, out)
				}
				return string(out)
			}
			sh(spin, append(append([]string{"-a"}, run.defines...), "turnstile.pml")...)
			ccArgs := []string{"-O2", "-o", "pan", "pan.c"}
			switch {
			case run.live:
			case run.claim == "":
				ccArgs = append(ccArgs, "-DSAFETY", "-DNOCLAIM")
			default:
				ccArgs = append(ccArgs, "-DSAFETY")
			}
			sh(cc, ccArgs...)
			panArgs := []string{"-m20000000"}
			if run.live {
				panArgs = append(panArgs, "-a", "-f")
			}
			if run.claim != "" {
				panArgs = append(panArgs, "-N", run.claim)
			}
			out := sh("./pan", panArgs...)
			errs := regexp.MustCompile(`errors: (\d+)`).FindStringSubmatch(out)
			states := regexp.MustCompile(`(?m)^\s*(\S+) states, stored`).FindStringSubmatch(out)
			if errs == nil || states == nil {
				t.Fatalf("unexpected pan output:\n%s", out)
			}
			if strings.Contains(out, "max search depth too small") {
				t.Fatalf("search truncated: raise -m\n%s", out)
			}
			n, _ := strconv.Atoi(errs[1])
			t.Logf("states stored: %s, errors: %d", states[1], n)
			switch {
			case run.fail && n == 0:
				t.Fatalf("spin found no counterexample; the property cannot fail?\n%s", out)
			case run.fail:
				if _, err := os.Stat(filepath.Join(dir, "turnstile.pml.trail")); err != nil {
					t.Fatalf("no counterexample trail: %v", err)
				}
				trail := sh(spin, append(append([]string{"-t", "-p", "-g"}, run.defines...), "turnstile.pml")...)
				t.Logf("counterexample: %d steps (replay: spin -t -p -g %s turnstile.pml)",
					strings.Count(trail, "proc "), strings.Join(run.defines, " "))
			case n != 0:
				t.Fatalf("property violated:\n%s", out)
			}
		})
	}
}
