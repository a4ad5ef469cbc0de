package presence

import (
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/windows"
)

// pdhItem is PDH_FMT_COUNTERVALUE_ITEM_W's layout on 32- and 64-bit
// Windows alike.
func TestPDHItemLayout(t *testing.T) {
	var it pdhItem
	if s, st, v := unsafe.Sizeof(it), unsafe.Offsetof(it.status), unsafe.Offsetof(it.value); s != 24 || st != 8 || v != 16 {
		t.Fatalf("size %d, status at %d, value at %d; want 24, 8, 16", s, st, v)
	}
}

// The items PdhGetFormattedCounterArrayW writes (their names after them
// in the same buffer) are read; an item whose status is not valid is
// left out.
func TestPDHItems(t *testing.T) {
	type item struct {
		name   string
		status uint32
		value  float64
	}
	in := []item{
		{"pid_9001_luid_0x00000000_0x0000D1F4_phys_0_eng_0_engtype_3D", pdhCstatusValid, 48.5},
		{"pid_9001_luid_0x00000000_0x0000E2A1_phys_0_eng_0_engtype_3D", pdhCstatusNewData, 11.5},
		{"pid_1234_luid_0x00000000_0x0000D1F4_phys_0_eng_0_engtype_3D", 0xC0000BC6, 99}, // PDH_CSTATUS_INVALID_DATA
		{"pid_77_luid_0x00000000_0x0000D1F4_phys_0_eng_0_engtype_3D", pdhCstatusValid, 3},
	}
	buf := make([]uint64, 256)
	items := unsafe.Slice((*pdhItem)(unsafe.Pointer(&buf[0])), len(in))
	off := uintptr(len(in)) * unsafe.Sizeof(pdhItem{})
	for i, v := range in {
		u, err := windows.UTF16FromString(v.name)
		if err != nil {
			t.Fatal(err)
		}
		p := (*uint16)(unsafe.Add(unsafe.Pointer(&buf[0]), off))
		copy(unsafe.Slice(p, len(u)), u)
		off += uintptr(len(u)) * 2
		items[i].name, items[i].status, items[i].value = p, v.status, v.value
	}
	got := pdhItems(buf, len(in))
	want := []pdhValue{{in[0].name, 48.5}, {in[1].name, 11.5}, {in[3].name, 3}}
	if !slices.Equal(got, want) {
		t.Fatalf("pdhItems = %+v, want %+v", got, want)
	}
	if uses := usesByPID(got); !slices.Equal(uses, []procUse{{pid: 9001, percent: 60}, {pid: 77, percent: 3}}) {
		t.Fatalf("usesByPID = %+v", uses)
	}
	if got := pdhItems(buf[:2], len(in)); got != nil {
		t.Fatalf("a buffer too short for its count read %+v", got)
	}
}

// The real query opens and samples, or says the GPU Engine counters are
// missing (as under Wine): it is off then, not an error.
func TestPDHQueryOpens(t *testing.T) {
	q, err := openPDH()
	switch {
	case IsOff(err):
		t.Logf("gpu_busy is off here: %v", err)
	case err != nil:
		t.Fatal(err)
	default:
		defer q.close()
		if _, err := q.sample(); err != nil {
			t.Fatal(err)
		}
	}
}
