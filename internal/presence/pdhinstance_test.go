package presence

import (
	"slices"
	"testing"
)

// Instances of \GPU Engine(*engtype_3D)\Utilization Percentage as WDDM
// names them: a process's 3D engines on each adapter are summed.
func TestUsesByPID(t *testing.T) {
	got := usesByPID([]pdhValue{
		{"pid_9001_luid_0x00000000_0x0000D1F4_phys_0_eng_0_engtype_3D", 48.6},
		{"pid_1234_luid_0x00000000_0x0000D1F4_phys_0_eng_0_engtype_3D", 2.2},
		{"pid_9001_luid_0x00000000_0x0000E2A1_phys_0_eng_0_engtype_3D", 11.5},
		{"pid_7_luid_0x00000000_0x0000D1F4_phys_0_eng_0_engtype_3D", 80},
		{"pid_7_luid_0x00000000_0x0000E2A1_phys_0_eng_0_engtype_3D", 75},
		{"_Total", 99},
		{"pid_x_luid_0x0_engtype_3D", 50},
	})
	want := []procUse{{pid: 9001, percent: 60}, {pid: 1234, percent: 2}, {pid: 7, percent: 100}}
	if !slices.Equal(got, want) {
		t.Fatalf("usesByPID = %+v, want %+v", got, want)
	}
}
