package presence

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// matcher holds globs, lower-cased: names are compared case-insensitively.
type matcher []string

func newMatcher(globs []string) (matcher, error) {
	m := make(matcher, 0, len(globs))
	for _, g := range globs {
		if g == "" {
			return nil, errors.New("empty process name glob")
		}
		if strings.Contains(g, "/") {
			return nil, fmt.Errorf("process name glob %q: globs match base names, not paths", g)
		}
		lg := strings.ToLower(g)
		if _, err := path.Match(lg, ""); err != nil {
			return nil, fmt.Errorf("process name glob %q: %w", g, err)
		}
		m = append(m, lg)
	}
	return m, nil
}

// match returns the first of names (each reduced to its base name) that
// one of the globs matches, as written (not lower-cased).
func (m matcher) match(names ...string) (string, bool) {
	for _, n := range names {
		b := baseName(n)
		if b == "" {
			continue
		}
		lb := strings.ToLower(b)
		cands := []string{lb}
		if t, ok := strings.CutSuffix(lb, ".exe"); ok && t != "" {
			cands = append(cands, t)
		}
		for _, g := range m {
			for _, c := range cands {
				if ok, _ := path.Match(g, c); ok {
					return b, true
				}
			}
		}
	}
	return "", false
}

// baseName is the last element of a path written with / or \ (a Windows
// path seen from Linux, as in a Proton game's command line), without the
// " (deleted)" Linux appends to /proc/PID/exe once the file is replaced.
func baseName(p string) string {
	p = strings.TrimSuffix(strings.TrimSpace(p), " (deleted)")
	p = strings.TrimRight(p, `/\`)
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		p = p[i+1:]
	}
	return p
}

// CheckGlobs returns the error a condition gives for globs that are
// empty, malformed, or contain "/".
func CheckGlobs(globs []string) error {
	_, err := newMatcher(globs)
	return err
}
