package eta

import (
	"encoding/json"
	"math"
	"slices"
	"time"
)

// figureSize is how many measures a figure keeps: enough for a median
// that one odd run does not move, few enough to follow a change (a new
// model, a driver update) within a few runs.
const figureSize = 9

// Figure is one measured duration: the last figureSize measures, oldest
// first, whose median is the figure.
type Figure struct {
	last []float64 // seconds
}

// figureJSON is a figure as the status and the store show it.
type figureJSON struct {
	Median float64   `json:"median_seconds"`
	Last   []float64 `json:"last_seconds"`
}

// Add records one measure, dropping the oldest past figureSize.
func (f *Figure) Add(d time.Duration) {
	if d < 0 {
		d = 0
	}
	if len(f.last) == figureSize {
		f.last = slices.Delete(f.last, 0, 1)
	}
	f.last = append(f.last, round3(d.Seconds()))
}

// Len is how many measures the figure holds.
func (f *Figure) Len() int {
	if f == nil {
		return 0
	}
	return len(f.last)
}

// Median is the median of the measures held; ok is false for none. A
// nil figure has none.
func (f *Figure) Median() (_ time.Duration, ok bool) {
	if f.Len() == 0 {
		return 0, false
	}
	s := slices.Clone(f.last)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return time.Duration(m * float64(time.Second)), true
}

// MarshalJSON writes the median beside the measures.
func (f Figure) MarshalJSON() ([]byte, error) {
	m, _ := f.Median()
	last := f.last
	if last == nil {
		last = []float64{}
	}
	return json.Marshal(figureJSON{Median: round3(m.Seconds()), Last: last})
}

// UnmarshalJSON reads the measures (the median is recomputed from them),
// keeping the newest figureSize and dropping any that is not a duration.
func (f *Figure) UnmarshalJSON(b []byte) error {
	var v figureJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	f.last = nil
	for _, s := range v.Last {
		if s >= 0 && !math.IsInf(s, 0) && !math.IsNaN(s) {
			f.last = append(f.last, s)
		}
	}
	if n := len(f.last); n > figureSize {
		f.last = f.last[n-figureSize:]
	}
	return nil
}

func (f *Figure) clone() *Figure {
	if f == nil {
		return nil
	}
	return &Figure{last: slices.Clone(f.last)}
}

func round3(s float64) float64 { return math.Round(s*1000) / 1000 }
