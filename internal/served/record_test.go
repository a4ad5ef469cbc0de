package served

import (
	"slices"
	"testing"
	"time"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
)

// p is a process with pid, parent ppid and start time 1000+pid, named
// name, in session sid.
func p(pid, ppid int32, name string) procs.Proc {
	return procs.Proc{ID: procs.ID{PID: pid, Start: 1000 + int64(pid)}, PPID: ppid, Name: name, Session: 10}
}

func pids(ps []procs.Proc) []int32 {
	out := make([]int32, len(ps))
	for i, p := range ps {
		out[i] = p.PID
	}
	return out
}

var now = time.Unix(1e9, 0)

// A llama-swap (pid 10) with a wrapper (20) whose child (21) holds the
// model and listens on the proxy port; self (1) is Caddy.
func swapTable() *procs.Table {
	return procs.NewTable([]procs.Proc{p(1, 0, "caddy"), p(10, 1, "llama-swap"), p(20, 10, "sh"), p(21, 20, "llama-server")})
}

func TestLookRemembersDescendantsAndNamedServers(t *testing.T) {
	rec := Look(Record{}, Sight{Local: true, Listeners: []int32{10}, Servers: []int32{21}, Answered: true, Models: []string{"m"}, Self: 1}, swapTable(), now)
	if rec.Engine == nil || rec.Engine.PID != 10 || rec.Unseen {
		t.Fatalf("engine %+v unseen %v; want pid 10, seen", rec.Engine, rec.Unseen)
	}
	if got := pids(rec.Servers); !slices.Equal(got, []int32{20, 21}) {
		t.Fatalf("servers %v; want the wrapper and its child, once each", got)
	}
	if !rec.Loaded() || !slices.Equal(rec.Models, []string{"m"}) {
		t.Fatalf("models %v", rec.Models)
	}
}

func TestAnOrphanStaysRemembered(t *testing.T) {
	rec := Look(Record{}, Sight{Local: true, Listeners: []int32{10}, Self: 1, Answered: true}, swapTable(), now)
	// llama-swap killed: the wrapper exited, its child is re-parented to
	// init and keeps its start time; nobody listens on the port.
	after := procs.NewTable([]procs.Proc{p(1, 0, "caddy"), p(21, 1, "llama-server")})
	rec = Look(rec, Sight{Local: true, Self: 1}, after, now)
	if left := LeftRefused(rec, after); !slices.Equal(pids(left), []int32{21}) {
		t.Fatalf("left %v; want the orphan 21", pids(left))
	}
	// A restarted llama-swap (pid 30) lists nothing: the orphan is still
	// remembered, and still alive after its API confirms it empty.
	restarted := procs.NewTable([]procs.Proc{p(1, 0, "caddy"), p(21, 1, "llama-server"), p(30, 1, "llama-swap")})
	rec = Look(rec, Sight{Local: true, Listeners: []int32{30}, Self: 1, Answered: true}, restarted, now)
	if left := Left(rec, restarted); !slices.Equal(pids(left), []int32{21}) {
		t.Fatalf("left after restart %v; want the orphan 21", pids(left))
	}
	gone := procs.NewTable([]procs.Proc{p(1, 0, "caddy"), p(30, 1, "llama-swap")})
	if left := Left(Look(rec, Sight{Local: true, Listeners: []int32{30}, Self: 1}, gone, now), gone); len(left) != 0 {
		t.Fatalf("left once it exited: %v", pids(left))
	}
}

func TestAReusedPIDIsAnotherProcess(t *testing.T) {
	rec := Look(Record{}, Sight{Local: true, Listeners: []int32{10}, Self: 1}, swapTable(), now)
	reused := procs.Proc{ID: procs.ID{PID: 21, Start: 99999}, PPID: 1, Name: "bash"}
	after := procs.NewTable([]procs.Proc{p(1, 0, "caddy"), reused})
	if left := LeftRefused(rec, after); len(left) != 0 {
		t.Fatalf("left %v: a reused PID counted as the model server", pids(left))
	}
}

func TestADrainingListenerStillCounts(t *testing.T) {
	rec := Look(Record{}, Sight{Local: true, Listeners: []int32{10}, Self: 1}, swapTable(), now)
	// SIGTERM: the port is closed, llama-swap still runs and drains.
	rec = Look(rec, Sight{Local: true, Self: 1}, swapTable(), now)
	if left := LeftRefused(rec, swapTable()); !slices.Equal(pids(left), []int32{10, 20, 21}) {
		t.Fatalf("left %v; want llama-swap and its servers", pids(left))
	}
	// Its API is not asked then; after the API confirmed, the listener
	// itself is not a model server.
	if left := Left(rec, swapTable()); !slices.Equal(pids(left), []int32{20, 21}) {
		t.Fatalf("left %v; want its servers only", pids(left))
	}
}

func TestUnseen(t *testing.T) {
	for name, s := range map[string]Sight{
		"another user's listener": {Local: true, Listeners: []int32{0}, Self: 1},
		"through this server":     {Local: true, Listeners: []int32{1}, Self: 1},
		"a process it runs under": {Local: true, Listeners: []int32{10}, Self: 21},
		"another host":            {Self: 1},
		"an unseen model server":  {Local: true, Listeners: []int32{10}, Servers: []int32{0}, Self: 1},
	} {
		if rec := Look(Record{}, s, swapTable(), now); !rec.Unseen {
			t.Errorf("%s: seen", name)
		}
	}
	complete := Sight{Local: true, Listeners: []int32{1}, Servers: []int32{21}, Complete: true, Self: 1}
	if rec := Look(Record{}, complete, swapTable(), now); rec.Unseen || !slices.Equal(pids(rec.Servers), []int32{21}) {
		t.Fatalf("servers found by command line: unseen %v, servers %v", rec.Unseen, pids(rec.Servers))
	}
	// This process and what it starts are never an engine's.
	if rec := Look(Record{}, Sight{Local: true, Listeners: []int32{1}, Self: 1}, swapTable(), now); len(rec.Servers) != 0 {
		t.Fatalf("servers %v: this process's children taken", pids(rec.Servers))
	}
}

func TestNotLocalKeepsWhatWasSeen(t *testing.T) {
	rec := Look(Record{}, Sight{Local: true, Listeners: []int32{10}, Self: 1, Answered: true, Models: []string{"m"}}, swapTable(), now)
	after := Look(rec, Sight{Self: 1}, nil, now)
	if !after.Unseen || !slices.Equal(pids(after.Servers), []int32{20, 21}) || !slices.Equal(after.Models, []string{"m"}) {
		t.Fatalf("after a look that could not see: %+v", after)
	}
}

func TestSame(t *testing.T) {
	a := Look(Record{}, Sight{Local: true, Listeners: []int32{10}, Self: 1}, swapTable(), now)
	b := Look(a, Sight{Local: true, Listeners: []int32{10}, Self: 1}, swapTable(), now.Add(time.Second))
	if !Same(a, b) {
		t.Fatal("two looks at the same processes differ")
	}
	c := Look(a, Sight{Local: true, Listeners: []int32{10}, Self: 1, Answered: true, Models: []string{"m"}}, swapTable(), now)
	if Same(a, c) {
		t.Fatal("a model loaded is no change")
	}
}

// An engine that leads its session (a service's) owns what runs in it,
// however re-parented: a model server started after the last look, whose
// engine died before the next, is still found.
func TestTheEnginesSessionIsItsOwn(t *testing.T) {
	caddy := procs.Proc{ID: procs.ID{PID: 1, Start: 1}, Name: "caddy", Session: 1}
	eng := procs.Proc{ID: procs.ID{PID: 10, Start: 1010}, PPID: 1, Name: "llama-swap", Session: 10}
	rec := Look(Record{}, Sight{Local: true, Listeners: []int32{10}, Self: 1},
		procs.NewTable([]procs.Proc{caddy, eng}), now)
	late := procs.Proc{ID: procs.ID{PID: 40, Start: 1040}, PPID: 1, Name: "llama-server", Session: 10}
	after := procs.NewTable([]procs.Proc{caddy, late})
	rec = Look(rec, Sight{Local: true, Self: 1}, after, now)
	if left := LeftRefused(rec, after); !slices.Equal(pids(left), []int32{40}) {
		t.Fatalf("left %v; want the model server of its session", pids(left))
	}
	// A session this process shares is nobody's own.
	shared := procs.NewTable([]procs.Proc{{ID: procs.ID{PID: 1, Start: 1}, Session: 10, Name: "caddy"}, eng, late})
	rec = Look(Record{}, Sight{Local: true, Listeners: []int32{10}, Self: 1}, shared, now)
	if len(rec.Servers) != 0 {
		t.Fatalf("servers %v from a session shared with this process", pids(rec.Servers))
	}
}

// An engine whose listener could not be seen stays unseen once it no
// longer listens: its going proves nothing of what it ran.
func TestUnseenStaysUnseenOnceNobodyListens(t *testing.T) {
	rec := Look(Record{}, Sight{Local: true, Listeners: []int32{0}, Self: 1, Answered: true, Models: []string{"m"}}, swapTable(), now)
	rec = Look(rec, Sight{Local: true, Self: 1}, swapTable(), now)
	if !rec.Unseen || !rec.Loaded() {
		t.Fatalf("after its port closed: unseen %v, loaded %v", rec.Unseen, rec.Loaded())
	}
	rec = Look(rec, Sight{Local: true, Listeners: []int32{10}, Self: 1}, swapTable(), now)
	if rec.Unseen {
		t.Fatal("still unseen once its listener is seen")
	}
}
