package turnstile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/httpapi/browsertest"
)

// The ComfyUI frontend's app and api objects, as far as the extension
// uses them (@comfyorg/comfyui-frontend-types: app.registerExtension,
// app.extensionManager.setting, api.clientId, api.api_base), and a page
// that loads the extension as the frontend does (from /extensions/) and
// runs its setup. ?clientId= is the tab's id; ?nosubtle takes
// crypto.subtle away, as on a plain-http LAN origin.
const (
	stubAppJS = `export const app = {
	extensions: [],
	registerExtension(ext) { this.extensions.push(ext); },
	extensionManager: { setting: { get: () => undefined } },
};
`
	stubAPIJS = `const q = new URLSearchParams(location.search);
export const api = {
	api_base: "",
	clientId: q.get("clientId"),
	initialClientId: q.get("clientId"),
	apiURL: (route) => "/api" + route,
	addEventListener() {},
	removeEventListener() {},
};
`
	stubTabHTML = `<!doctype html>
<html><head><title>ComfyUI</title></head><body>
<script type="module">
const q = new URLSearchParams(location.search);
if (q.has("nosubtle")) Object.defineProperty(Crypto.prototype, "subtle", { get: () => undefined, configurable: true });
window.ext = await import("/extensions/comfyui-gpu-turnstile/gpu_turnstile.js");
const { app } = await import("/scripts/app.js");
for (const e of app.extensions) await e.setup?.(app);
window.ready = true;
</script>
</body></html>
`
)

// comfyFrontendSite serves, on the ComfyUI site, the extension's js as
// ComfyUI serves a custom node's WEB_DIRECTORY, and the stub frontend.
func comfyFrontendSite(t *testing.T) string {
	t.Helper()
	js, err := filepath.Abs("examples/comfyui-gpu-turnstile/js")
	if err != nil {
		t.Fatal(err)
	}
	stub := t.TempDir()
	writeStubFrontend(t, stub)
	return fmt.Sprintf(`handle_path /extensions/comfyui-gpu-turnstile/* {
		root * %q
		file_server
	}
	handle /scripts/* {
		root * %q
		file_server
	}
	handle /tab.html {
		root * %q
		file_server
	}`, js, stub, stub)
}

// writeStubFrontend writes the stub frontend into dir.
func writeStubFrontend(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{"scripts/app.js": stubAppJS, "scripts/api.js": stubAPIJS, "tab.html": stubTabHTML}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// extensionNode is the folder name the extension has under ComfyUI's
// custom_nodes, which names its /extensions/ path.
const extensionNode = "comfyui-gpu-turnstile"

// installExtension puts the extension under the real ComfyUI's
// custom_nodes (loaded through --whitelist-custom-nodes, as the others
// are disabled) and the stub frontend in its --front-end-root, before
// ComfyUI starts.
func (rc *realComfy) installExtension(t *testing.T) {
	t.Helper()
	writeStubFrontend(t, filepath.Join(rc.dir, "front"))
	if err := os.CopyFS(filepath.Join(rc.dir, "base", "custom_nodes", extensionNode), os.DirFS(filepath.Join("examples", extensionNode))); err != nil {
		t.Fatal(err)
	}
}

// testExtension: the real ComfyUI serves the extension's JS from
// /extensions/ through Caddy, and it shows the banner for its own tab's
// waiting prompt only.
func (rc *realComfy) testExtension(t *testing.T) {
	if browsertest.Find() == "" {
		t.Skip("no Chromium found (Debian package chromium); .ci/run installs it")
	}
	rc.mu.Lock()
	log := rc.log.tail(2000)
	rc.mu.Unlock()
	if !strings.Contains(log, "custom_nodes/"+extensionNode) || strings.Contains(log, "IMPORT FAILED") || strings.Contains(log, "NODE_CLASS_MAPPINGS") {
		t.Fatalf("ComfyUI did not load the extension's node cleanly:\n%s", log)
	}
	h, _ := rc.harness(t, "")
	if r := h.do("GET", h.image+"/extensions/"+extensionNode+"/gpu_turnstile.js", ""); r.status != 200 || !strings.Contains(r.body, "registerExtension") {
		t.Fatalf("ComfyUI does not serve the extension: %d %.200s", r.status, r.body)
	}
	checkExtension(t, h, func(ctx context.Context, client string) <-chan result {
		b, _ := json.Marshal(map[string]any{"prompt": quickJob.workflow(rc.color()), "client_id": client})
		return h.postAsync(ctx, h.image+"/api/prompt", string(b))
	})
}

func clientHashOf(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:16]
}

// TestComfyUIExtension loads the ComfyUI extension in two Chromium tabs
// through Caddy, against the fake ComfyUI and the live event stream: a
// tab shows nothing while the GPU is free, the banner while its own prompt
// waits (one tab hashing without crypto.subtle), nothing for another
// tab's, and nothing once its prompt has run.
func TestComfyUIExtension(t *testing.T) {
	if browsertest.Find() == "" {
		t.Skip("no Chromium found (Debian package chromium); .ci/run installs it")
	}
	h := newHarness(t, harnessOptions{site: comfyFrontendSite(t)})
	h.waitIdle()
	checkExtension(t, h, func(ctx context.Context, client string) <-chan result {
		return h.postAsync(ctx, h.image+"/api/prompt", strings.Replace(promptBody(10), `"client_id":"browser"`, `"client_id":"`+client+`"`, 1))
	})
}

// checkExtension loads the extension from h's image site in two tabs and
// follows them while the GPU is free, while one tab's prompt (queued by
// prompt with its client id) waits behind a hold, while both wait, and
// once both have run.
func checkExtension(t *testing.T, h *harness, prompt func(ctx context.Context, client string) <-chan result) {
	ctx, problems := browsertest.New(t)
	tabA, cancelA := chromedp.NewContext(ctx)
	defer cancelA()
	tabB, cancelB := chromedp.NewContext(ctx)
	defer cancelB()
	a := extensionTab{t: t, ctx: tabA, name: "tab A"}
	b := extensionTab{t: t, ctx: tabB, name: "tab B"}
	a.open(h.image + "/tab.html?clientId=tab-a&nosubtle")
	b.open(h.image + "/tab.html?clientId=tab-b")
	if got := a.eval(`crypto.subtle === undefined && ext.seen.hash`); got != clientHashOf("tab-a") {
		t.Fatalf("tab A without crypto.subtle hashes its id to %q, want %s", got, clientHashOf("tab-a"))
	}
	if got := b.eval(`ext.seen.hash`); got != clientHashOf("tab-b") {
		t.Fatalf("tab B hashes its id to %q, want %s", got, clientHashOf("tab-b"))
	}
	a.noBanner("the GPU is free")
	b.noBanner("the GPU is free")

	hold := h.takeHold(t, "test", "1m")
	pctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answerA := prompt(pctx, "tab-a")
	h.waitStatus("tab A's prompt waiting", func(st Status) bool { return len(st.Waiters) == 1 })
	a.banner("Your prompt waits for the GPU: a hold, 1st in line")
	b.poll("tab B renders tab A's prompt waiting", `(ext.seen.rendered?.waiters ?? []).length === 1`)
	b.noBanner("only tab A's prompt waits")

	answerB := prompt(pctx, "tab-b")
	h.waitStatus("both prompts waiting", func(st Status) bool { return len(st.Waiters) == 2 })
	b.banner("Your prompt waits for the GPU: a hold, 2nd in line")
	a.banner("Your prompt waits for the GPU: a hold, 1st in line")

	h.releaseHold(t, hold)
	for _, answer := range []<-chan result{answerA, answerB} {
		if r := <-answer; r.status != 200 {
			t.Fatalf("prompt: %d %s", r.status, r.body)
		}
	}
	h.waitIdle()
	a.poll("tab A's banner gone", `!document.getElementById("gpu-turnstile-banner")`)
	b.poll("tab B's banner gone", `!document.getElementById("gpu-turnstile-banner")`)
	if p := problems(); len(p) > 0 {
		t.Fatalf("script errors: %v", p)
	}
}

// extensionTab is one browser tab with the extension loaded.
type extensionTab struct {
	t    *testing.T
	ctx  context.Context
	name string
}

func (x extensionTab) open(url string) {
	x.t.Helper()
	if _, err := chromedp.Run(x.ctx, chromedp.Navigate(url)); err != nil {
		x.t.Fatalf("%s: %v", x.name, err)
	}
	x.poll("the extension following the status", `window.ready === true && ext.seen.rendered !== null && ext.seen.hash !== null`)
}

func (x extensionTab) poll(what, expr string) {
	x.t.Helper()
	if _, err := chromedp.Run(x.ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		x.t.Fatalf("%s: %s: %v; banner %q", x.name, what, err, x.eval(`document.getElementById("gpu-turnstile-banner")?.textContent ?? ""`))
	}
}

func (x extensionTab) eval(expr string) string {
	x.t.Helper()
	v, err := chromedp.Run(x.ctx, chromedp.Evaluate[any](expr))
	if err != nil {
		x.t.Fatalf("%s: %s: %v", x.name, expr, err)
	}
	return fmt.Sprint(v)
}

func (x extensionTab) banner(prefix string) {
	x.t.Helper()
	x.poll("banner "+prefix, `(document.getElementById("gpu-turnstile-banner")?.textContent ?? "").startsWith(`+fmt.Sprintf("%q", prefix)+`)`)
}

// noBanner checks that the tab shows no banner for the status it has.
func (x extensionTab) noBanner(why string) {
	x.t.Helper()
	if got := x.eval(`document.getElementById("gpu-turnstile-banner")?.textContent ?? ""`); got != "" {
		x.t.Fatalf("%s shows %q while %s", x.name, got, why)
	}
}
