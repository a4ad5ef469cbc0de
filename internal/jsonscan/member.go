package jsonscan

// Member returns the raw value of the top-level member called name in
// the JSON object doc (a string with its quotes, an object or array with
// its brackets, a number or literal), and ok; ok is false if doc is not a
// JSON object, is malformed before the member's value ends, or has no
// such member. raw is a part of doc, not a copy. It does not allocate.
func Member(doc []byte, name string) (raw []byte, ok bool) {
	i := skipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return nil, false
	}
	i = skipSpace(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		return nil, false
	}
	for {
		keyEnd, val, end := nextMember(doc, i)
		if end < 0 {
			return nil, false
		}
		if keyIs(doc[i:keyEnd], name) {
			return memberValue(doc, val, end)
		}
		i = skipSpace(doc, end)
		if i >= len(doc) || doc[i] != ',' {
			return nil, false // '}': not found, or malformed
		}
		i = skipSpace(doc, i+1)
	}
}

// nextMember reads the member starting at doc[i] (its name's opening
// quote): the name spans doc[i:keyEnd], and its value doc[val:end]. end
// is -1 if the member is malformed or cut short.
func nextMember(doc []byte, i int) (keyEnd, val, end int) {
	if i >= len(doc) || doc[i] != '"' {
		return 0, 0, -1
	}
	keyEnd = skipString(doc, i)
	if keyEnd < 0 {
		return 0, 0, -1
	}
	colon := skipSpace(doc, keyEnd)
	if colon >= len(doc) || doc[colon] != ':' {
		return 0, 0, -1
	}
	val = skipSpace(doc, colon+1)
	return keyEnd, val, skipValue(doc, val)
}

// memberValue is the value doc[start:end] of the member asked for, if
// what follows it shows it whole: a ',' or '}' after any spaces, or the
// end of doc after a value that cannot go on (not a number's last
// digit).
func memberValue(doc []byte, start, end int) ([]byte, bool) {
	j := skipSpace(doc, end)
	switch {
	case j < len(doc):
		if doc[j] != ',' && doc[j] != '}' {
			return nil, false
		}
	case j == end && isNumberStart(doc[start]):
		return nil, false // cut short maybe: "12" of "123"
	}
	return doc[start:end], true
}

// keyIs says whether quoted, a JSON string with its quotes, is name once
// unescaped.
func keyIs(quoted []byte, name string) bool {
	content := quoted[1 : len(quoted)-1]
	// The same bytes are the same string unless escapes or bytes that
	// are not UTF-8 (decoded as U+FFFD) make the JSON one differ.
	if string(content) == name && plain(content) {
		return true
	}
	return equalDecoded(content, name)
}

// Object says whether doc is one whole, well-formed JSON object (spaces
// around it aside), as json.Valid would: what tells a member that is
// absent (Member's false on an Object) from one that cannot be read. It
// reads all of doc and does not allocate.
func Object(doc []byte) bool {
	i := skipSpace(doc, 0)
	if i >= len(doc) || doc[i] != '{' {
		return false
	}
	i = skipSpace(doc, i+1)
	if i < len(doc) && doc[i] == '}' {
		return skipSpace(doc, i+1) == len(doc)
	}
	for {
		_, _, end := nextMember(doc, i)
		if end < 0 {
			return false
		}
		i = skipSpace(doc, end)
		switch {
		case i >= len(doc):
			return false
		case doc[i] == ',':
			i = skipSpace(doc, i+1)
		case doc[i] == '}':
			return skipSpace(doc, i+1) == len(doc)
		default:
			return false
		}
	}
}
