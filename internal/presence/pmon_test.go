//go:build !windows

package presence

import "testing"

// Headers as drivers print them (engines-api.md; issue threads of tools
// that parse pmon): columns differ, so they are found by name.
func TestPmonHeader(t *testing.T) {
	for _, tc := range []struct {
		line string
		want pmonColumns
		ok   bool
	}{
		{"# gpu        pid  type    sm   mem   enc   dec   command", pmonColumns{1, 3, 7}, true},
		{"# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command ", pmonColumns{1, 3, 9}, true},
		{"# gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command", pmonColumns{1, 3, 11}, true},
		{"#Date       Time        gpu        pid  type    sm   mem   enc   dec    command", pmonColumns{3, 5, 9}, true},
		{"# Idx           #    C/G      %      %      %      %      %      %    name", pmonColumns{-1, -1, -1}, false},
		{"# gpu   pid  type   fb   command", pmonColumns{1, -1, 4}, false}, // -s m: no sm to judge by
	} {
		got, ok := pmonHeader(tc.line)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("pmonHeader(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

func TestPmonRow(t *testing.T) {
	cols, _ := pmonHeader("# gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command")
	for _, tc := range []struct {
		line string
		want procUse
		idle bool
		bad  bool
	}{
		{"    0       4242     G     57     12      -      -      -      -    Game.exe", procUse{4242, "Game.exe", 57}, false, false},
		{"    0    1186862     C      -      -      -      -      -      -    python3        ", procUse{1186862, "python3", 0}, false, false},
		{"    0      31337   C+G      3      1      -      -      -      -    Web Content", procUse{31337, "Web Content", 3}, false, false},
		{"    0          -     -      -      -      -      -      -      -    -              ", procUse{}, true, false},
		{"    0       4242     G", procUse{}, false, true},
		{"    0       x242     G     57     12      -      -      -      -    Game.exe", procUse{}, false, true},
		{"    0       4242     G    N/A     12      -      -      -      -    Game.exe", procUse{}, false, true},
	} {
		got, idle, err := cols.row(tc.line)
		if (err != nil) != tc.bad || idle != tc.idle || got != tc.want {
			t.Errorf("row(%q) = %+v, %v, %v; want %+v, idle %v, error %v", tc.line, got, idle, err, tc.want, tc.idle, tc.bad)
		}
	}
}
