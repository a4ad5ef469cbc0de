package jsonscan

// nesting records, a bit a level, whether each open container is an
// object (1) or an array (0), so that its closing bracket can be checked.
type nesting struct {
	bits  [(maxDepth + 63) / 64]uint64
	depth int
}

// open enters a container; false past maxDepth.
func (n *nesting) open(object bool) bool {
	if n.depth == maxDepth {
		return false
	}
	w, b := n.depth/64, uint(n.depth%64)
	if object {
		n.bits[w] |= 1 << b
	} else {
		n.bits[w] &^= 1 << b
	}
	n.depth++
	return true
}

// inObject says whether the innermost open container is an object.
func (n *nesting) inObject() bool {
	d := n.depth - 1
	return n.bits[d/64]&(1<<uint(d%64)) != 0
}

// skipContainer returns the index past the object or array that opens at
// doc[i], or -1 if it is malformed, cut short or nested too deep. It
// walks the nesting in a loop, not by recursion, so that no document
// can exhaust the stack.
func skipContainer(doc []byte, i int) int {
	var n nesting
	for {
		// At a value's first byte.
		switch doc[i] {
		case '{', '[':
			object := doc[i] == '{'
			if !n.open(object) {
				return -1
			}
			i = skipSpace(doc, i+1)
			if i >= len(doc) {
				return -1
			}
			if c := doc[i]; (object && c == '}') || (!object && c == ']') {
				n.depth--
				i++
				break // an empty container: a value whole
			}
			if i = firstOf(doc, i, object); i < 0 {
				return -1
			}
			continue
		default:
			if i = skipValue(doc, i); i < 0 { // a scalar
				return -1
			}
		}
		// Past a whole value: close what ends here, go on to the next.
		for {
			if n.depth == 0 {
				return i
			}
			i = skipSpace(doc, i)
			if i >= len(doc) {
				return -1
			}
			object := n.inObject()
			switch c := doc[i]; {
			case c == ',':
				i = skipSpace(doc, i+1)
			case (object && c == '}') || (!object && c == ']'):
				n.depth--
				i++
				continue
			default:
				return -1
			}
			if i = firstOf(doc, i, object); i < 0 {
				return -1
			}
			break
		}
	}
}

// firstOf returns the index of the first byte of the next value in a
// container whose next element starts at doc[i]: the element itself in
// an array, the value after the member's name and colon in an object.
// -1 if doc ends there or the name is malformed.
func firstOf(doc []byte, i int, object bool) int {
	if object {
		if i >= len(doc) || doc[i] != '"' {
			return -1
		}
		if i = skipString(doc, i); i < 0 {
			return -1
		}
		if i = skipSpace(doc, i); i >= len(doc) || doc[i] != ':' {
			return -1
		}
		i = skipSpace(doc, i+1)
	}
	if i >= len(doc) {
		return -1
	}
	return i
}
