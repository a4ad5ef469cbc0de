package jsonscan

import (
	"strings"
	"testing"
)

func TestMember(t *testing.T) {
	deep := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	tooDeep := "[" + deep + "]"
	for _, tc := range []struct {
		name, doc, member, want string
		found                   bool
	}{
		{"first", `{"model":"llama3.2","messages":[]}`, "model", `"llama3.2"`, true},
		{"after nested values", `{"messages":[{"role":"user","content":"hi","model":"x"}],"opts":{"a":[1,2.5e-3,{"b":null}]},"model":"qwen3:8b"}`, "model", `"qwen3:8b"`, true},
		{"spaces", " \r\n\t{ \"a\" : 1 , \"model\" :\t\"m\" }", "model", `"m"`, true},
		{"an object", `{"options":{"num_ctx":8192}}`, "options", `{"num_ctx":8192}`, true},
		{"true", `{"stream":true}`, "stream", `true`, true},
		{"null", `{"stream":null}`, "stream", `null`, true},
		{"a number", `{"n":-12.5E+3}`, "n", `-12.5E+3`, true},
		{"a number then spaces at the end", `{"n":12 `, "n", `12`, true},
		{"the first of two", `{"model":"a","model":"b"}`, "model", `"a"`, true},
		{"an escaped name", `{"mod\u0065l":"m"}`, "model", `"m"`, true},
		{"a name with a surrogate pair", `{"\ud83d\ude00":1}`, "\U0001F600", `1`, true},
		{"not the escaped one", `{"model\\":"x","model":"m"}`, "model", `"m"`, true},
		{"escapes in strings skipped", `{"p":"a\"b\\\/\b\f\n\r\t\u00e9","model":"m"}`, "model", `"m"`, true},
		{"nested as deep as encoding/json goes", `{"a":` + deep + `,"model":"m"}`, "model", `"m"`, true},
		{"cut after the value", `{"model":"llama3.2","prompt":"a long pro`, "model", `"llama3.2"`, true},
		{"cut right after the value", `{"model":"llama3.2"`, "model", `"llama3.2"`, true},
		{"malformed after the value's comma", `{"model":"m",}`, "model", `"m"`, true},

		{"absent", `{"messages":[]}`, "model", "", false},
		{"empty object", `{}`, "model", "", false},
		{"only nested", `{"m":{"model":"x"}}`, "model", "", false},
		{"case differs", `{"Model":"m"}`, "model", "", false},
		{"an array", `["model","x"]`, "model", "", false},
		{"not JSON", `model=llama3.2`, "model", "", false},
		{"empty", ``, "model", "", false},
		{"cut in the value", `{"model":"llama3`, "model", "", false},
		{"cut in a number", `{"n":12`, "n", "", false},
		{"cut in a literal", `{"stream":tru`, "stream", "", false},
		{"cut before the member", `{"messages":[{"content":"hi"`, "model", "", false},
		{"garbage after the value", `{"model":"m" x}`, "model", "", false},
		{"mismatched brackets before", `{"a":[1},"model":"m"}`, "model", "", false},
		{"a control character before", "{\"a\":\"x\ny\",\"model\":\"m\"}", "model", "", false},
		{"a bad escape before", `{"a":"\x","model":"m"}`, "model", "", false},
		{"a short \\u before", `{"a":"\u12","model":"m"}`, "model", "", false},
		{"a leading zero before", `{"a":01,"model":"m"}`, "model", "", false},
		{"a bare minus before", `{"a":-,"model":"m"}`, "model", "", false},
		{"no digits after the point", `{"a":1.,"model":"m"}`, "model", "", false},
		{"no digits in the exponent", `{"a":1e+,"model":"m"}`, "model", "", false},
		{"a missing colon", `{"a" 1,"model":"m"}`, "model", "", false},
		{"a missing comma", `{"a":1 "model":"m"}`, "model", "", false},
		{"an unquoted name", `{a:1,"model":"m"}`, "model", "", false},
		{"a trailing comma before", `{"a":[1,],"model":"m"}`, "model", "", false},
		{"too deep before", `{"a":` + tooDeep + `,"model":"m"}`, "model", "", false},
		{"a byte order mark", "\xef\xbb\xbf{\"model\":\"m\"}", "model", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, ok := Member([]byte(tc.doc), tc.member)
			if ok != tc.found || string(raw) != tc.want {
				t.Errorf("Member(%.80q, %q) = %q, %v; want %q, %v", tc.doc, tc.member, raw, ok, tc.want, tc.found)
			}
		})
	}
}

func TestObject(t *testing.T) {
	for doc, want := range map[string]bool{
		`{}`: true, ` { "a" : [1, {"b": null}], "c": "d" } `: true, chatBody(true): true,
		``: false, `[]`: false, `{`: false, `{"a":1`: false, `{"a":1,}`: false, `{"a":1 "b":2}`: false,
		`{"a":1}x`: false, `{"a":1}}`: false, `{,}`: false, `{"a"}`: false, `"a"`: false,
	} {
		if got := Object([]byte(doc)); got != want {
			t.Errorf("Object(%.60q) = %v", doc, got)
		}
	}
}

func TestStrings(t *testing.T) {
	for _, tc := range []struct {
		raw, want  string
		ok, copied bool
	}{
		{`"llama3.2"`, "llama3.2", true, false},
		{`""`, "", true, false},
		{`"qwen3:8b é"`, "qwen3:8b é", true, false},
		{`"a\"b\\c\/d\b\f\n\r\t"`, "a\"b\\c/d\b\f\n\r\t", true, true},
		{`"\u00e9\u20AC"`, "é€", true, true},
		{`"\ud83d\ude00"`, "\U0001F600", true, true},
		{`"\ud83d"`, "\uFFFD", true, true},
		{`"\ude00\ud83d x"`, "\uFFFD\uFFFD x", true, true},
		{`"\ud83d\u0041"`, "\uFFFDA", true, true},
		{"\"a\xffb\"", "a\uFFFDb", true, true},
		{`7`, "", false, false},
		{`null`, "", false, false},
		{`"cut`, "", false, false},
		{`"a"b"`, "", false, false},
		{"\"a\nb\"", "", false, false},
		{`"\q"`, "", false, false},
	} {
		raw := []byte(tc.raw)
		text, ok := Unquote(raw)
		if ok != tc.ok || string(text) != tc.want {
			t.Errorf("Unquote(%q) = %q, %v; want %q, %v", tc.raw, text, ok, tc.want, tc.ok)
		}
		if s, ok := String([]byte(tc.raw)); ok != tc.ok || s != tc.want {
			t.Errorf("String(%q) = %q, %v; want %q, %v", tc.raw, s, ok, tc.want, tc.ok)
		}
		if tc.ok && !Equal([]byte(tc.raw), tc.want) {
			t.Errorf("Equal(%q, %q) is false", tc.raw, tc.want)
		}
		if Equal([]byte(tc.raw), tc.want+"x") || (tc.want != "" && Equal([]byte(tc.raw), tc.want[:len(tc.want)-1])) {
			t.Errorf("Equal(%q) is true of another string", tc.raw)
		}
		if ok && !tc.copied && len(text) > 0 && &text[0] != &raw[1] {
			t.Errorf("Unquote(%q) copied a string without escapes", tc.raw)
		}
	}
	if Equal([]byte("\"\xff\""), "\xff") {
		t.Error("a byte that is not UTF-8 equals itself: encoding/json reads it as U+FFFD")
	}
	if !Equal([]byte("\"\xff\""), "\uFFFD") {
		t.Error("a byte that is not UTF-8 is not U+FFFD")
	}
}

func TestLiterals(t *testing.T) {
	for raw, want := range map[string][3]bool{ // Bool's v, ok; IsNull
		"true": {true, true, false}, "false": {false, true, false}, "null": {false, false, true},
		`"true"`: {false, false, false}, "1": {false, false, false}, "": {false, false, false},
	} {
		v, ok := Bool([]byte(raw))
		if got := [3]bool{v, ok, IsNull([]byte(raw))}; got != want {
			t.Errorf("%q: Bool %v %v, IsNull %v; want %v", raw, got[0], got[1], got[2], want)
		}
	}
}

// What a request's path reads allocates nothing: the member, the
// comparison, a string without escapes as bytes.
func TestNoAllocation(t *testing.T) {
	doc := []byte(chatBody(false))
	if n := testing.AllocsPerRun(100, func() {
		raw, _ := Member(doc, "model")
		_ = Equal(raw, "llama3.2")
		_, _ = Unquote(raw)
		s, _ := Member(doc, "stream")
		_, _ = Bool(s)
	}); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
