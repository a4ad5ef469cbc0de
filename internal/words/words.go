// Package words writes what people read in answers and notices: a place
// in line, a predicted wait.
package words

import (
	"fmt"
	"math"
	"time"
)

// Ordinal writes n as 1st, 2nd, 3rd, 4th, 11th, 21st.
func Ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return fmt.Sprintf("%d%s", n, suffix)
}

// About writes d rounded up for people: "a moment", "about 40 s",
// "about 3 min", "about 2 h".
func About(d time.Duration) string {
	switch s := math.Ceil(d.Seconds()); {
	case s < 1:
		return "a moment"
	case s < 90:
		return fmt.Sprintf("about %.0f s", s)
	case s < 90*60:
		return fmt.Sprintf("about %.0f min", math.Ceil(s/60))
	default:
		return fmt.Sprintf("about %.0f h", math.Ceil(s/3600))
	}
}
