package jsonscan

import "testing"

func TestStringMember(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{"model":"qwen3:8b","stream":true}`, "qwen3:8b"},
		{`{"messages":[{"model":"inner"}],"model":"m\u00e9"}`, "mé"},
		{`{"model":7}`, ""},
		{`{"stream":true}`, ""},
		{`not json`, ""},
	} {
		if got := StringMember([]byte(c.doc), "model"); got != c.want {
			t.Errorf("%s: %q, want %q", c.doc, got, c.want)
		}
	}
}
