package route

import "testing"

type named struct{ name, kind string }

func (n *named) Name() string { return n.name }
func (n *named) Kind() string { return n.kind }

func TestImageEngine(t *testing.T) {
	comfy, a1111, forge := &named{"comfy", "comfyui"}, &named{"a1111", "a1111"}, &named{"forge", "a1111"}
	images := []*named{comfy, a1111, forge}
	for _, tc := range []struct {
		name, kind string
		anyKind    bool
		want       *named
	}{
		{"", "a1111", false, a1111},        // the first of the route's kind
		{"forge", "comfyui", false, forge}, // the handler's engine, whatever the route
		{"none", "a1111", false, nil},
		{"", "", false, nil},  // a route of no kind
		{"", "", true, comfy}, // ... sent as image work: the first engine
		{"", "vllm", true, nil},
	} {
		if got := ImageEngine(images, tc.name, tc.kind, tc.anyKind); got != tc.want {
			t.Errorf("ImageEngine(%q, %q, %v) = %v, want %v", tc.name, tc.kind, tc.anyKind, got, tc.want)
		}
	}
}
