package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// FuzzMember checks Member against encoding/json on any document: what
// it finds is what encoding/json decodes for the same (first) member;
// on a valid document it finds all that encoding/json finds; and String
// and Equal agree with encoding/json's reading of a string.
func FuzzMember(f *testing.F) {
	for _, seed := range []string{
		chatBody(false), chatBody(true), `{"model":"m","stream":false}`, `{"mod\u0065l":"m"}`,
		`{"a":[1,{"b":null}],"model":"x\"y"}`, `{"n":-0.5e10}`, `{"model":"cut`, `[1]`, "{\"model\":\"\xff\"}",
		`{"\ud83d\ude00":"\ud83d"}`, `{"a":01}`, `{"stream":tru`,
	} {
		f.Add([]byte(seed), "model")
	}
	f.Add([]byte(`{"stream":true}`), "stream")
	f.Add([]byte(`{"prompt":{"1":{}},"client_id":"c"}`), "client_id")
	f.Fuzz(func(t *testing.T, doc []byte, name string) {
		raw, ok := Member(doc, name)
		want, wantOK := decoderMember(doc, name)
		if ok && (!wantOK || !bytes.Equal(raw, want)) {
			t.Fatalf("Member(%q, %q) = %q; encoding/json: %q, %v", doc, name, raw, want, wantOK)
		}
		if !ok && wantOK && json.Valid(doc) {
			t.Fatalf("Member(%q, %q) found nothing; encoding/json: %q", doc, name, want)
		}
		if ok {
			checkString(t, raw)
		}
		first := bytes.TrimLeft(doc, " \t\r\n")
		if obj, want := Object(doc), json.Valid(doc) && first[0] == '{'; obj != want {
			t.Fatalf("Object(%q) = %v; encoding/json: %v", doc, obj, want)
		}
	})
}

// checkString checks String, Unquote and Equal on raw against
// encoding/json.
func checkString(t *testing.T, raw []byte) {
	var want string
	isStr := len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &want) == nil
	s, ok := String(raw)
	if ok != isStr || s != want {
		t.Fatalf("String(%q) = %q, %v; encoding/json: %q, %v", raw, s, ok, want, isStr)
	}
	if text, ok := Unquote(raw); ok != isStr || string(text) != want {
		t.Fatalf("Unquote(%q) = %q, %v; encoding/json: %q", raw, text, ok, want)
	}
	if isStr && (!Equal(raw, want) || Equal(raw, want+"x")) {
		t.Fatalf("Equal(%q, %q) is wrong", raw, want)
	}
	if isStr && !utf8.ValidString(s) {
		t.Fatalf("String(%q) is not UTF-8", raw)
	}
}
