package presence

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
)

// pdh.dll is not wrapped by golang.org/x/sys: its few calls are made here.
var (
	pdh                              = windows.NewLazySystemDLL("pdh.dll")
	procPdhOpenQueryW                = pdh.NewProc("PdhOpenQueryW")
	procPdhAddEnglishCounterW        = pdh.NewProc("PdhAddEnglishCounterW")
	procPdhCollectQueryData          = pdh.NewProc("PdhCollectQueryData")
	procPdhGetFormattedCounterArrayW = pdh.NewProc("PdhGetFormattedCounterArrayW")
	procPdhCloseQuery                = pdh.NewProc("PdhCloseQuery")
)

const (
	pdhFmtDouble        = 0x00000200
	pdhMoreData         = 0x800007D2
	pdhNoData           = 0x800007D5
	pdhInvalidData      = 0xC0000BC6
	pdhCstatusNoObject  = 0xC0000BB8
	pdhCstatusNoCounter = 0xC0000BB9
	pdhCstatusValid     = 0x00000000
	pdhCstatusNewData   = 0x00000001

	// gpuEngine3D is every process's use of every 3D engine, by its
	// English name (PdhAddEnglishCounterW: the same on every language).
	gpuEngine3D = `\GPU Engine(*engtype_3D)\Utilization Percentage`
)

// pdhQuery is one open PDH query with the GPU Engine counter in it.
type pdhQuery struct {
	query, counter uintptr
}

// openPDH opens the query and takes its first sample (a rate needs two).
// Windows without the GPU Engine counters (no WDDM 2 driver) is an
// *OffError.
func openPDH() (*pdhQuery, error) {
	if err := procPdhOpenQueryW.Find(); err != nil {
		return nil, offf("pdh.dll cannot be used: %v", err)
	}
	q := &pdhQuery{}
	if r, _, _ := procPdhOpenQueryW.Call(0, 0, uintptr(unsafe.Pointer(&q.query))); r != 0 {
		return nil, fmt.Errorf("PdhOpenQuery: status 0x%08X", r)
	}
	path, err := windows.UTF16PtrFromString(gpuEngine3D)
	if err != nil {
		q.close()
		return nil, err
	}
	r, _, _ := procPdhAddEnglishCounterW.Call(q.query, uintptr(unsafe.Pointer(path)), 0, uintptr(unsafe.Pointer(&q.counter)))
	switch {
	case r == pdhCstatusNoObject || r == pdhCstatusNoCounter:
		q.close()
		return nil, offf("Windows has no %s counter (a WDDM 2.0 or later display driver provides it)", gpuEngine3D)
	case r != 0:
		q.close()
		return nil, fmt.Errorf("PdhAddEnglishCounter %s: status 0x%08X", gpuEngine3D, r)
	}
	if _, err := q.sample(); err != nil {
		q.close()
		return nil, err
	}
	return q, nil
}

func (q *pdhQuery) close() {
	procPdhCloseQuery.Call(q.query)
}

// sample collects the counter and returns each instance's value since the
// previous collection.
func (q *pdhQuery) sample() ([]pdhValue, error) {
	if r, _, _ := procPdhCollectQueryData.Call(q.query); r != 0 && r != pdhNoData {
		return nil, fmt.Errorf("PdhCollectQueryData: status 0x%08X", r)
	}
	var size, count uint32
	r, _, _ := procPdhGetFormattedCounterArrayW.Call(q.counter, pdhFmtDouble,
		uintptr(unsafe.Pointer(&size)), uintptr(unsafe.Pointer(&count)), 0)
	switch {
	case r == pdhNoData || r == pdhInvalidData || (r == 0 && count == 0):
		return nil, nil // no instance, or the first collection
	case r != pdhMoreData:
		return nil, fmt.Errorf("PdhGetFormattedCounterArray: status 0x%08X", r)
	}
	buf := make([]uint64, (size+7)/8) // 8-aligned, as the items' doubles
	r, _, _ = procPdhGetFormattedCounterArrayW.Call(q.counter, pdhFmtDouble,
		uintptr(unsafe.Pointer(&size)), uintptr(unsafe.Pointer(&count)), uintptr(unsafe.Pointer(&buf[0])))
	if r != 0 {
		return nil, fmt.Errorf("PdhGetFormattedCounterArray: status 0x%08X", r)
	}
	return pdhItems(buf, int(count)), nil
}

// pdhItem is PDH_FMT_COUNTERVALUE_ITEM_W with a double: the instance
// name's pointer, then PDH_FMT_COUNTERVALUE (a status and, 8-aligned,
// the value), 24 bytes on 32- and 64-bit Windows alike.
type pdhItem struct {
	name   *uint16
	_      [8 - unsafe.Sizeof(uintptr(0))]byte
	status uint32
	_      uint32
	value  float64
}

// pdhItems reads count items from the start of buf, where
// PdhGetFormattedCounterArrayW put them (their names follow them in buf),
// leaving out those whose status says the value is not valid.
func pdhItems(buf []uint64, count int) []pdhValue {
	if count == 0 || uintptr(len(buf))*8 < uintptr(count)*unsafe.Sizeof(pdhItem{}) {
		return nil
	}
	items := unsafe.Slice((*pdhItem)(unsafe.Pointer(&buf[0])), count)
	out := make([]pdhValue, 0, count)
	for _, it := range items {
		if it.status != pdhCstatusValid && it.status != pdhCstatusNewData {
			continue
		}
		out = append(out, pdhValue{instance: windows.UTF16PtrToString(it.name), value: it.value})
	}
	return out
}
