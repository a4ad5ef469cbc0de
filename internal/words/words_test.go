package words

import (
	"testing"
	"time"
)

func TestOrdinal(t *testing.T) {
	for n, want := range map[int]string{1: "1st", 2: "2nd", 3: "3rd", 4: "4th", 11: "11th", 12: "12th", 13: "13th", 21: "21st", 102: "102nd", 111: "111th"} {
		if got := Ordinal(n); got != want {
			t.Errorf("Ordinal(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestAbout(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "a moment", 39200 * time.Millisecond: "about 40 s", 150 * time.Second: "about 3 min", 3 * time.Hour: "about 3 h"} {
		if got := About(d); got != want {
			t.Errorf("About(%v) = %q, want %q", d, got, want)
		}
	}
}
