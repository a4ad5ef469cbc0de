//go:build !windows

package presence

import (
	"fmt"
	"strings"
)

// vdfNode is one key of a Valve KeyValues text file (VDF, as Steam's
// registry.vdf): a value, or a block of keys.
type vdfNode struct {
	key      string
	value    string
	children []*vdfNode // a block's keys, in order; nil for a value
	block    bool
}

// parseVDF reads KeyValues text: keys and values quoted ("key" "value",
// with \" \\ \n \t escapes) or bare, blocks in braces, // comments, and
// conditionals such as [$WIN32] after a value (skipped). The result is a
// block holding the file's top-level keys.
func parseVDF(text string) (*vdfNode, error) {
	p := &vdfParser{s: text, line: 1}
	root := &vdfNode{block: true}
	if err := p.block(root, false); err != nil {
		return nil, err
	}
	return root, nil
}

// lookup finds the value at path (keys compared case-insensitively, as
// Steam does), the first of a repeated key.
func (n *vdfNode) lookup(path ...string) (string, bool) {
	for _, k := range path {
		var next *vdfNode
		for _, c := range n.children {
			if strings.EqualFold(c.key, k) {
				next = c
				break
			}
		}
		if next == nil {
			return "", false
		}
		n = next
	}
	return n.value, !n.block
}

type vdfParser struct {
	s    string
	i    int
	line int
}

// block reads keys into n up to its closing brace (or the end of the
// text, at the top level).
func (p *vdfParser) block(n *vdfNode, nested bool) error {
	for {
		tok, kind, err := p.token()
		switch {
		case err != nil:
			return err
		case kind == vdfEOF && nested:
			return fmt.Errorf("registry.vdf line %d: a block is not closed", p.line)
		case kind == vdfEOF:
			return nil
		case kind == vdfClose && nested:
			return nil
		case kind != vdfString:
			return fmt.Errorf("registry.vdf line %d: unexpected %q", p.line, tok)
		}
		child := &vdfNode{key: tok}
		if err := p.value(child); err != nil {
			return err
		}
		n.children = append(n.children, child)
	}
}

// value reads what follows a key: a string (and a conditional), or a
// block.
func (p *vdfParser) value(n *vdfNode) error {
	tok, kind, err := p.token()
	switch {
	case err != nil:
		return err
	case kind == vdfOpen:
		n.block = true
		return p.block(n, true)
	case kind != vdfString:
		return fmt.Errorf("registry.vdf line %d: key %q has no value", p.line, n.key)
	}
	n.value = tok
	p.skipSpace()
	if strings.HasPrefix(p.s[p.i:], "[") {
		if end := strings.IndexByte(p.s[p.i:], ']'); end >= 0 {
			p.i += end + 1
		}
	}
	return nil
}

type vdfKind int

const (
	vdfEOF vdfKind = iota
	vdfString
	vdfOpen
	vdfClose
)

// token reads the next string or brace.
func (p *vdfParser) token() (string, vdfKind, error) {
	p.skipSpace()
	if p.i >= len(p.s) {
		return "", vdfEOF, nil
	}
	switch c := p.s[p.i]; c {
	case '{':
		p.i++
		return "{", vdfOpen, nil
	case '}':
		p.i++
		return "}", vdfClose, nil
	case '"':
		return p.quoted()
	}
	start := p.i
	for p.i < len(p.s) && !strings.ContainsRune(" \t\r\n{}\"", rune(p.s[p.i])) {
		p.i++
	}
	return p.s[start:p.i], vdfString, nil
}

// quoted reads a quoted string, p.i on its opening quote.
func (p *vdfParser) quoted() (string, vdfKind, error) {
	var b strings.Builder
	for p.i++; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return b.String(), vdfString, nil
		case c == '\\' && p.i+1 < len(p.s):
			p.i++
			b.WriteByte(unescape(p.s[p.i]))
		default:
			if c == '\n' {
				p.line++
			}
			b.WriteByte(c)
		}
	}
	return "", vdfEOF, fmt.Errorf("registry.vdf line %d: a quoted string is not closed", p.line)
}

// unescape is the byte that a backslash and c stand for.
func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 't':
		return '\t'
	}
	return c
}

// skipSpace skips white space and // comments.
func (p *vdfParser) skipSpace() {
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '\n':
			p.line++
			p.i++
		case c == ' ' || c == '\t' || c == '\r':
			p.i++
		case strings.HasPrefix(p.s[p.i:], "//"):
			end := strings.IndexByte(p.s[p.i:], '\n')
			if end < 0 {
				p.i = len(p.s)
				return
			}
			p.i += end
		default:
			return
		}
	}
}
