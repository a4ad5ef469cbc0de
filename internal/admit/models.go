package admit

import (
	"hash/maphash"
	"sync/atomic"
)

// modelSlots is how many model names are kept for reuse: a server runs a
// few models, and a name that clients make up only takes one slot from
// another name, which is copied again when next seen.
const modelSlots = 64

// modelNames keeps the model names requests named, so that a name seen
// before costs a request no copy and no lock: the names are read from
// bodies that are dropped once forwarded, and outlive them in the status
// and in memory-aware admission's ledger. Each name has one slot, by its
// hash.
type modelNames struct {
	seed  maphash.Seed
	slots [modelSlots]atomic.Pointer[string]
}

var models = modelNames{seed: maphash.MakeSeed()}

// name returns b as a string, the one kept if b was seen before.
func (n *modelNames) name(b []byte) string {
	slot := &n.slots[maphash.Bytes(n.seed, b)%modelSlots]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	s := string(b)
	slot.Store(&s)
	return s
}
