package gpu

import "testing"

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://127.0.0.1:11435":            "http://127.0.0.1:11435",
		"http://user:secret@10.0.0.2:11435": "http://user:xxxxx@10.0.0.2:11435",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q", in, got)
		}
	}
}
