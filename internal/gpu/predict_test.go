package gpu

import (
	"testing"
	"time"
)

func TestOutlookWords(t *testing.T) {
	for _, c := range []struct {
		o    Outlook
		want string
	}{
		{Outlook{}, ""},
		{Outlook{Position: 1}, "you would be 1st in line"},
		{Outlook{Position: 2, Wait: 39200 * time.Millisecond, Known: true}, "you would be 2nd in line, expected to start in about 40 s"},
		{Outlook{Position: 3, Wait: 0, Known: true}, "you would be 3rd in line, expected to start in a moment"},
		{Outlook{Position: 11, Wait: 95 * time.Second, Known: true}, "you would be 11th in line, expected to start in about 2 min"},
		{Outlook{Position: 22, Wait: 2 * time.Hour, Known: true}, "you would be 22nd in line, expected to start in about 2 h"},
		{Outlook{Position: 113, Wait: 3 * time.Second, Known: true}, "you would be 113th in line, expected to start in about 3 s"},
	} {
		if got := c.o.Words(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.o, got, c.want)
		}
	}
}
