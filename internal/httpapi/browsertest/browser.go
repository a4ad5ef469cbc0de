// Package browsertest starts headless Chromium for the tests of the status
// page, as this project's closed test machines want it, and collects the
// page's script errors. Tests only: nothing else imports it.
package browsertest

import (
	"context"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Find returns the path of an installed Chromium, or "".
func Find() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// New starts headless Chromium for t and returns its context, bounded to
// 60 s, with a func that lists the script errors the page has raised so
// far. It skips t where no Chromium is installed.
func New(t *testing.T) (context.Context, func() []string) {
	t.Helper()
	chromium := Find()
	if chromium == "" {
		t.Skip("no Chromium found (Debian package chromium); .ci/run installs it")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1200, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelT)
	var mu sync.Mutex
	var problems []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		if e, ok := ev.(*runtime.EventExceptionThrown); ok {
			problems = append(problems, e.ExceptionDetails.Text)
		}
		if e, ok := ev.(*runtime.EventConsoleAPICalled); ok && e.Type == runtime.ConsoleAPICalledTypeError {
			problems = append(problems, "console error")
		}
	}); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), problems...)
	}
}
