package fleet

import (
	"fmt"
	"testing"
)

// The clients remembered are bounded: past the bound, those whose
// affinity ends soonest go.
func TestAffinitiesAreCapped(t *testing.T) {
	m := map[string]affinity{}
	for i := range 10 {
		m[fmt.Sprint(i)] = affinity{pin: "h", expires: int64(i)}
	}
	capAffinities(m, 4)
	if len(m) != 4 {
		t.Fatalf("%d left, want 4", len(m))
	}
	for _, c := range []string{"6", "7", "8", "9"} {
		if _, ok := m[c]; !ok {
			t.Errorf("%s, one of the latest to end, was dropped", c)
		}
	}
	capAffinities(m, 4)
	if len(m) != 4 {
		t.Fatal("a map within the bound was cut")
	}
}
