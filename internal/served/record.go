package served

import (
	"slices"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
)

// Record is what is remembered of one LLM engine's processes.
type Record struct {
	// Engine is the process that listened on the engine's port when last
	// seen; nil if none was seen.
	Engine *procs.Proc `json:"engine,omitempty"`
	// Servers are the processes that served its models: the listener's
	// descendants, the model servers its kind names, and theirs. A
	// process stays remembered until it is seen gone, even once it is no
	// longer anyone's descendant (a wrapper's grandchild, an orphan).
	Servers []procs.Proc `json:"servers,omitempty"`
	// Unseen is set when the engine's processes could not all be seen:
	// its listener's PID cannot be read, or it is not on this host.
	Unseen bool `json:"unseen,omitempty"`
	// Models are the models loaded at the last contact.
	Models []string `json:"models,omitempty"`
	// CardPIDs are the compute processes the card listed while an Unseen
	// engine had models: once none is listed, the card shows them gone.
	CardPIDs []int32 `json:"card_pids,omitempty"`
	// CardUsed is the card's used memory, and Footprint the learned
	// footprints of Models, at the last look while an Unseen engine had
	// models: used memory down by Footprint shows them gone too, where
	// the card lists no process (a container).
	CardUsed  int64 `json:"card_used,omitempty"`
	Footprint int64 `json:"footprint,omitempty"`
	// At is when the record was last brought up to date.
	At time.Time `json:"at"`
}

// Loaded reports whether the engine had something loaded when last seen:
// models listed, or model servers alive.
func (r Record) Loaded() bool { return len(r.Models) > 0 || len(r.Servers) > 0 }

// Sight is one look at an engine: what its API and the host's sockets
// said, given to Look with the process table of the same moment.
type Sight struct {
	// Local is false for an engine on another host: nothing of it can be
	// seen here.
	Local bool
	// Listeners are the PIDs listening on the engine's port (0: a
	// process this one may not see); none if nobody listens.
	Listeners []int32
	// Servers are the model servers its kind names: the listeners of
	// their ports (0: a listener this process may not see), or processes
	// found by their command line.
	Servers []int32
	// Complete says Servers hold every model server of the engine on
	// this host, whether or not its listener can be seen.
	Complete bool
	// Models are the models its API lists, if it answered.
	Models []string
	// Answered is false when its API did not answer: Models are then
	// those of the last contact.
	Answered bool
	// Self is this process: never one of an engine's (an engine reached
	// through this same server), nor are its descendants.
	Self int32
}

// Look brings prev up to date with what s and t show: the processes
// remembered that are still alive, with their descendants, and the
// listener's descendants and the kind's model servers found now.
func Look(prev Record, s Sight, t *procs.Table, now time.Time) Record {
	rec := Record{At: now, Models: prev.Models, CardPIDs: prev.CardPIDs, CardUsed: prev.CardUsed, Footprint: prev.Footprint}
	if s.Answered {
		rec.Models = slices.Clone(s.Models)
	}
	if !s.Local {
		// Nothing can be checked: what was seen stays remembered.
		rec.Unseen, rec.Engine, rec.Servers = true, prev.Engine, prev.Servers
		return rec
	}
	keep := newSet(s.Self)
	mine := ancestry(t, s.Self)
	if len(s.Listeners) == 0 {
		// Nobody listens: nothing says whether what it ran can be seen
		// now, so what was said last stands.
		rec.Unseen = prev.Unseen && !s.Complete
	}
	for _, pid := range s.Listeners {
		switch p, ok := t.Get(pid); {
		case pid <= 0 || mine[pid]:
			// Another user's; or this very server, or a process it runs
			// under (a test harness), whose descendants are not an
			// engine's: what runs its models cannot be seen from here.
			rec.Unseen = !s.Complete
		case ok && rec.Engine == nil:
			rec.Engine = &p
			keep.skip(p.ID)
			keep.addAll(t.Descendants(pid))
		}
	}
	if rec.Engine == nil && prev.Engine != nil && t.Alive(prev.Engine.ID) {
		// The listener closed its port but still runs (llama-swap drains
		// its requests after SIGTERM): it and its children still count.
		rec.Engine = prev.Engine
		keep.skip(prev.Engine.ID)
		keep.addAll(t.Descendants(prev.Engine.PID))
	}
	if rec.Engine != nil {
		keep.addAll(ownedBy(t, *rec.Engine, mine))
	} else if prev.Engine != nil {
		// Gone: what it ran is still marked as its own.
		keep.addAll(ownedBy(t, *prev.Engine, mine))
	}
	for _, pid := range s.Servers {
		if pid <= 0 {
			rec.Unseen = true
			continue
		}
		keep.addAll(t.Tree(pid))
	}
	for _, p := range t.Left(ids(prev.Servers)) {
		keep.addAll(t.Tree(p.PID))
	}
	rec.Servers = keep.list
	return rec
}

// Same reports whether a and b remember the same: the same processes,
// models and visibility (when they were seen aside).
func Same(a, b Record) bool {
	sameEngine := (a.Engine == nil) == (b.Engine == nil) && (a.Engine == nil || a.Engine.ID == b.Engine.ID)
	return sameEngine && a.Unseen == b.Unseen &&
		slices.Equal(ids(a.Servers), ids(b.Servers)) &&
		slices.Equal(a.Models, b.Models) && slices.Equal(a.CardPIDs, b.CardPIDs)
}

// Left is what of rec's model servers is alive in t: after the engine's
// API confirmed it empty, each of these still holds what it loaded.
func Left(rec Record, t *procs.Table) []procs.Proc {
	return t.Left(ids(rec.Servers))
}

// LeftRefused is what of rec is alive in t when the engine refuses
// connections: its model servers and its listener (which may be
// draining its requests with its port closed).
func LeftRefused(rec Record, t *procs.Table) []procs.Proc {
	left := Left(rec, t)
	if rec.Engine != nil && t.Alive(rec.Engine.ID) {
		left = append([]procs.Proc{*rec.Engine}, left...)
	}
	return left
}

// ownedBy lists the processes of the session eng leads, however they were
// re-parented: an engine run as a service (systemd, a container's init,
// setsid) leads a session of its own, and its model servers keep it in
// process groups of their own. A session this process (mine) is in is
// not the engine's alone. (A cgroup is no such mark: a container's port
// proxy shares its daemon's.)
func ownedBy(t *procs.Table, eng procs.Proc, mine map[int32]bool) []procs.Proc {
	if eng.Session != eng.PID {
		return nil
	}
	own := t.InSession(eng.Session)
	for _, p := range own {
		if mine[p.PID] {
			return nil
		}
	}
	return own
}

// ancestry is self and the processes it descends from, in t.
func ancestry(t *procs.Table, self int32) map[int32]bool {
	mine := map[int32]bool{self: true}
	for p, ok := t.Get(self); ok && p.PPID > 0 && !mine[p.PPID]; p, ok = t.Get(p.PPID) {
		mine[p.PPID] = true
	}
	return mine
}

func ids(ps []procs.Proc) []procs.ID {
	out := make([]procs.ID, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

// set collects processes once each, in the order found, leaving out the
// process self and everything under it.
type set struct {
	self    int32
	seen    map[procs.ID]bool
	skipped map[procs.ID]bool
	list    []procs.Proc
}

func newSet(self int32) *set {
	return &set{self: self, seen: map[procs.ID]bool{}, skipped: map[procs.ID]bool{}}
}

func (s *set) skip(id procs.ID) { s.skipped[id] = true }

func (s *set) addAll(ps []procs.Proc) {
	for _, p := range ps {
		if p.PID == s.self || s.seen[p.ID] || s.skipped[p.ID] {
			continue
		}
		s.seen[p.ID] = true
		s.list = append(s.list, p)
	}
}
