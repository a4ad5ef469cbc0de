package httpapi

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
)

// pageHTML is the live status page: one file, its style and script inline,
// no outside assets, so it works offline and under a strict policy.
//
//go:embed page.html
var pageHTML []byte

// pageCSP allows the page its own inline style and script (pinned by their
// hashes) and requests to its own origin, nothing else.
var pageCSP = func() string {
	hash := func(open, close string) string {
		s := string(pageHTML)
		i := strings.Index(s, open)
		j := strings.Index(s, close)
		if i < 0 || j < i {
			panic("page.html lacks " + open)
		}
		sum := sha256.Sum256([]byte(s[i+len(open) : j]))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return fmt.Sprintf("default-src 'none'; script-src %s; style-src %s; connect-src 'self'; img-src 'self' data:; "+
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
		hash("<script>", "</script>"), hash("<style>", "</style>"))
}()

// pageWithControls is the status page with its "Cancel job" button
// enabled, for a status handler with controls. Only the body's attribute
// differs, so the hashes of its script and style still hold.
var pageWithControls = func() []byte {
	page := bytes.Replace(pageHTML, []byte("<body>"), []byte(`<body data-controls="on">`), 1)
	if bytes.Equal(page, pageHTML) {
		panic("page.html lacks <body>")
	}
	return page
}()

// wantsHTML reports whether a browser asked for the page.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// servePage serves the page; with controls, its "Cancel job" button too.
func servePage(w http.ResponseWriter, controls bool) error {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	page := pageHTML
	if controls {
		page = pageWithControls
	}
	_, err := w.Write(page)
	return err
}
