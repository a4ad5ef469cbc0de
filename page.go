package turnstile

import (
	_ "embed"
	"net/http"
	"strings"
)

//go:embed page.html
var pageHTML []byte

// pageCSP allows the page nothing but itself: its own script and style
// (served inline, pinned by hash-free 'self' rules through same-origin
// fetches) and no outside origin at all.
const pageCSP = "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// wantsHTML reports whether a browser asked for the page.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

func servePage(w http.ResponseWriter, r *http.Request) error {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	_, err := w.Write(pageHTML)
	return err
}
