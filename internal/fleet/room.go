package fleet

import "slices"

// What a host's models are worth to the fleet: the cost of evicting them
// to load another model or to run an image job, and whether the fleet
// needs a host to keep serving them.

// evictions is what making room on cs[i] may cost in models loaded again
// later: each model loaded there counts 1, and 4 when no other host that
// is free for chats has it loaded (its next chat loads it cold).
func evictions(cs []Candidate, i int) int64 {
	var n int64
	for _, m := range cs[i].Host.Models {
		n++
		if !loadedElsewhere(cs, i, m) {
			n += 3
		}
	}
	return n
}

// loadedElsewhere reports whether a host of cs other than cs[i] that
// chats may go to has model loaded.
func loadedElsewhere(cs []Candidate, i int, model string) bool {
	for j := range cs {
		h := cs[j].Host
		if j != i && cs[j].Up && h != nil && h.LLMUp && !h.blocked() && h.Loaded(model) {
			return true
		}
	}
	return false
}

// free reports whether chats may go to c now: its LLM engines are up and
// nothing image-bound is in their way.
func free(c *Candidate) bool {
	return c.Up && c.Host != nil && c.Host.LLMUp && !c.Host.blocked()
}

// keptForChats reports whether cs[i] is kept out of image work: it is free
// for chats, and the models loaded on the hosts free for chats (those in
// use) would not fit on the others without it, by the most models each
// has held at once (or any host has, if more: a host that has not yet
// been asked for more models may well hold them). An image job then queues behind one that renders
// rather than leave the chats to swap models on too few hosts.
func keptForChats(cs []Candidate, i int) bool {
	if !free(&cs[i]) {
		return false
	}
	inUse, room, most := 0, 0, 1
	for j := range cs {
		most = max(most, cs[j].Capacity)
	}
	for j := range cs {
		if !free(&cs[j]) {
			continue
		}
		if j != i {
			room += max(cs[j].Capacity, most)
		}
		for k, m := range cs[j].Host.Models {
			if !loadedBefore(cs, j, k, m) {
				inUse++
			}
		}
	}
	return inUse > room
}

// loadedBefore reports whether model m, the k-th of cs[j]'s, is also
// loaded on a host free for chats before it (counted there).
func loadedBefore(cs []Candidate, j, k int, m string) bool {
	if slices.Contains(cs[j].Host.Models[:k], m) {
		return true
	}
	for i := range j {
		if free(&cs[i]) && slices.Contains(cs[i].Host.Models, m) {
			return true
		}
	}
	return false
}
