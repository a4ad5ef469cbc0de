package gpu

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/netaddr"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/procs"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/served"
	"github.com/gpu-turnstile/caddy-gpu-turnstile/internal/upstreams/poll"
)

// The LLM engines' processes: what served their models is remembered
// (package served) and must be gone before the GPU is handed over, even
// when the engine's API says it is empty, or refuses connections.

// ProcessStore keeps what is remembered of each LLM engine's processes
// across restarts of Caddy: an orphan left by an engine that died before
// a restart is still known after it. Its methods are called outside any
// lock, from one goroutine at a time.
type ProcessStore interface {
	// LoadProcesses returns what SaveProcesses kept for the engine (by
	// name), nil if nothing.
	LoadProcesses(ctx context.Context, engine string) ([]byte, error)
	SaveProcesses(ctx context.Context, engine string, data []byte) error
}

// ProcessLeft is a process of an LLM engine still alive when the engine
// should be empty, as the status shows it.
type ProcessLeft struct {
	PID  int32  `json:"pid"`
	Name string `json:"name"`
}

// minLookSpacing is the least time between two looks that LLM admissions
// ask for: under a steady stream of requests, a look (one walk of the
// process table) runs at most this often.
const minLookSpacing = 250 * time.Millisecond

// kickLook asks the process loop for a look at the LLM engines, without
// waiting or allocating: an LLM request was admitted, so a model may be
// loading.
func (g *GPU) kickLook() {
	select {
	case g.lookKick <- struct{}{}:
	default:
	}
}

// watchProcesses starts, once, the loop that keeps the LLM engines'
// process records up to date; g.mu is held.
func (g *GPU) watchProcesses() {
	if g.looking {
		return
	}
	g.looking = g.spawnLocked(g.processLoop)
}

// processLoop looks at the LLM engines after LLM admissions and every
// unload_poll_interval while one has models loaded.
func (g *GPU) processLoop() {
	var last time.Time
	for {
		if !g.awaitLook() {
			return
		}
		if poll.Sleep(g.ctx, time.Until(last.Add(minLookSpacing))) != nil {
			return
		}
		last = time.Now()
		g.lookAll(g.cfg())
	}
}

// awaitLook waits for the next look to be due: an admission asked for
// one, or unload_poll_interval passed while an engine has models loaded
// or LLM requests are in flight (a model may be loading: the look that
// an admission asked for may come before the engine has started it). It
// is false once the GPU is closed.
func (g *GPU) awaitLook() bool {
	var tick <-chan time.Time
	if c := g.cfg(); c != nil && (g.lock.Snapshot().Shared > 0 || g.anyLoaded(c)) {
		t := time.NewTimer(c.UnloadPoll)
		defer t.Stop()
		tick = t.C
	}
	select {
	case <-g.ctx.Done():
		return false
	case <-g.lookKick:
	case <-tick:
	}
	return true
}

// anyLoaded reports whether an LLM engine of c was last seen with models
// or model servers.
func (g *GPU) anyLoaded(c *Config) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range c.LLMs {
		if g.runLocked(e.Name()).served.Loaded() {
			return true
		}
	}
	return false
}

// lookAll looks at every LLM engine of c that is not being emptied (an
// emptying looks for itself).
func (g *GPU) lookAll(c *Config) {
	if c == nil {
		return
	}
	for _, e := range c.LLMs {
		g.mu.Lock()
		emptying := g.runLocked(e.Name()).state == stateEmptying
		g.mu.Unlock()
		if emptying {
			continue
		}
		ctx, cancel := context.WithTimeout(g.ctx, c.ProbeTimeout)
		g.lookAt(ctx, c, e, askModels)
		cancel()
	}
}

// lookAt brings what is remembered of e's processes up to date from one
// look at its API and at the host's processes, and returns it with the
// process table it was read from: nil for an engine not on this host, or
// with the error that kept the processes from being read (what was
// remembered is then kept as it was).
func (g *GPU) lookAt(ctx context.Context, c *Config, e LLMEngine, api apiView) (served.Record, *procs.Table, error) {
	g.lookMu.Lock()
	defer g.lookMu.Unlock()
	prev := g.restoreServed(ctx, c, e)
	s, t, err := g.sight(ctx, e, api)
	if err != nil {
		return prev, nil, err
	}
	rec := served.Look(prev, s, t, time.Now())
	if rec.Unseen && s.Answered && len(rec.Models) > 0 {
		// What the card shows while it has models; not once it is gone.
		g.readCard(ctx, c, &rec)
	}
	if served.Same(prev, rec) {
		g.mu.Lock()
		g.runLocked(e.Name()).served = rec
		g.mu.Unlock()
	} else {
		g.withRun(e, func(r *engineRun) { r.served = rec }) // the status shows it
		g.saveServed(ctx, c, e, rec)
	}
	return rec, t, nil
}

// apiView is what a look asks of an engine's API.
type apiView uint8

const (
	// askModels asks it for its models (and its kind for its servers).
	askModels apiView = iota
	// askServers asks only what its kind needs to find its servers: the
	// engine is being emptied, which asks for its models itself.
	askServers
	// confirmedEmpty is askServers once its API has confirmed it empty.
	confirmedEmpty
)

// sight is one look at e: its API's models and model servers, as api
// says, and the host's listeners and processes (nil when e is not on
// this host).
func (g *GPU) sight(ctx context.Context, e LLMEngine, api apiView) (served.Sight, *procs.Table, error) {
	s := served.Sight{Self: int32(os.Getpid())}
	var ms engine.ModelServers
	if k := engine.KindOf(e); k != nil && k.Servers != nil {
		ms, _ = k.Servers(ctx, e, api == askModels)
	} else if api == askModels {
		if models, err := e.Loaded(ctx); err == nil {
			ms.Models, ms.Listed = models, true
		}
	}
	s.Models, s.Answered, s.Complete = ms.Models, ms.Listed, ms.Complete
	if api == confirmedEmpty {
		s.Models, s.Answered = nil, true
	}
	addr, err := netaddr.EngineAddr(e.URL())
	if err != nil || !addr.Local() {
		return s, nil, nil
	}
	t, err := procs.Snapshot(ctx)
	if err != nil {
		return s, nil, err
	}
	ports := append([]int{addr.Port()}, ms.Ports...)
	ls, err := g.listenerCacheOf(e.Name()).listeners(ctx, t, ports, time.Now())
	if err != nil {
		return s, nil, err
	}
	s.Local = true
	s.Listeners = ls[addr.Port()]
	for _, p := range ms.Ports {
		if pids, ok := ls[p]; ok {
			s.Servers = append(s.Servers, pids...)
		}
	}
	s.Servers = append(s.Servers, ms.PIDs...)
	return s, t, nil
}

// readCard notes what the card shows now of an engine whose own
// processes cannot be seen while it has models: its compute processes
// (once none of them is listed, its models are gone), and its used
// memory with the footprints learned of those models (used memory down by
// them shows it too). Without a card reading, or if it fails, those of
// the last reading are kept.
func (g *GPU) readCard(ctx context.Context, c *Config, rec *served.Record) {
	if c.CardProcesses != nil {
		if on, err := c.CardProcesses(ctx); err == nil {
			for pid := range g.imageProcesses(ctx, c) {
				delete(on, pid)
			}
			rec.CardPIDs = slices.Sorted(maps.Keys(on))
		}
	}
	if c.CardUsed != nil {
		if used, err := c.CardUsed(ctx); err == nil {
			rec.CardUsed, rec.Footprint = used, g.footprints(c, rec.Models)
		}
	}
}

// imageProcesses are the processes of the image engines on this host (the
// listeners of their ports and their descendants), which the card lists
// beside an LLM engine's and are not its.
func (g *GPU) imageProcesses(ctx context.Context, c *Config) map[int32]bool {
	var ports []int
	for _, e := range c.Images {
		if a, err := netaddr.EngineAddr(e.URL()); err == nil && a.Local() {
			ports = append(ports, a.Port())
		}
	}
	own := map[int32]bool{}
	if len(ports) == 0 {
		return own
	}
	ls, err := procs.Listeners(ctx, ports)
	if err != nil {
		return own
	}
	t, err := procs.Snapshot(ctx)
	if err != nil {
		return own
	}
	for _, pids := range ls {
		for _, pid := range pids {
			for _, p := range t.Tree(pid) {
				own[p.PID] = true
			}
		}
	}
	return own
}

// footprints is the sum of the learned footprints of models (0 when one
// is unknown, or without vram_admission).
func (g *GPU) footprints(c *Config, models []string) int64 {
	if c.Memory == nil {
		return 0
	}
	lc := c.Memory.rules()
	g.mu.Lock()
	defer g.mu.Unlock()
	var sum int64
	for _, m := range models {
		fp, ok := g.mem.ledger.FootprintOf(lc, modelKey(m))
		if !ok || fp.Bytes <= 0 {
			return 0
		}
		sum += fp.Bytes
	}
	return sum
}

// restoreServed is what is remembered of e's processes, read from the
// process store the first time it is asked for.
func (g *GPU) restoreServed(ctx context.Context, c *Config, e LLMEngine) served.Record {
	g.mu.Lock()
	r := g.runLocked(e.Name())
	rec, restored := r.served, r.servedRestored
	r.servedRestored = true
	g.mu.Unlock()
	if restored || c.ProcessStore == nil {
		return rec
	}
	data, err := c.ProcessStore.LoadProcesses(ctx, e.Name())
	if err != nil || data == nil {
		if err != nil {
			g.log().Warn("reading what was remembered of the engine's processes", zap.String("engine", e.Name()), zap.Error(err))
		}
		return rec
	}
	var kept served.Record
	if err := json.Unmarshal(data, &kept); err != nil {
		g.log().Warn("what was remembered of the engine's processes does not decode; starting afresh", zap.String("engine", e.Name()), zap.Error(err))
		return rec
	}
	return kept
}

// saveServed writes rec to the process store.
func (g *GPU) saveServed(ctx context.Context, c *Config, e LLMEngine, rec served.Record) {
	if c.ProcessStore == nil {
		return
	}
	data, err := json.Marshal(rec)
	if err == nil {
		err = c.ProcessStore.SaveProcesses(ctx, e.Name(), data)
	}
	if err != nil {
		g.log().Warn("keeping what is known of the engine's processes", zap.String("engine", e.Name()), zap.Error(err))
	}
}

// confirmGone waits, within ctx, until none of the processes that served
// e's models is alive, once its API has confirmed it empty (contact nil)
// or it refuses connections (contact the refusal). An engine emptied by
// sleeping keeps its processes. What is left shows in the status.
func (g *GPU) confirmGone(ctx context.Context, c *Config, e LLMEngine, contact error) error {
	refused := contact != nil && engine.Refused(contact)
	if _, sleeps := e.(Waker); sleeps && !refused {
		return nil
	}
	if !refused && !g.servesAny(e) {
		g.setLeft(e, nil, "")
		return nil // its API confirmed it, and no process of it was seen serving
	}
	if forced(ctx) {
		g.ForgetProcesses("a hold with force")
		return nil
	}
	logged := false
	for pace := poll.New(c.UnloadPoll); ; {
		left, why := g.leftOf(ctx, c, e, refused)
		if ctx.Err() != nil {
			if why == "" {
				why = "unload_timeout passed before its processes could be seen gone"
			}
			return notEmptied(e, why)
		}
		g.setLeft(e, left, why)
		if why == "" {
			if refused {
				g.log().Warn(e.Name()+" refuses connections, and none of the processes that served its models is alive: counted as not running", zap.Error(contact))
			}
			return nil
		}
		if !logged {
			logged = true
			g.log().Warn(e.Name()+" is not empty yet: "+why, zap.String("processes", procList(left)))
		}
		if pace.Wait(ctx) != nil {
			return notEmptied(e, why)
		}
	}
}

// notEmptied is the error of an engine whose processes keep it from
// counting as emptied.
func notEmptied(e Engine, why string) error {
	return fmt.Errorf("%s %w: %s (once they exit, retry; DELETE /gpu_turnstile/job?force=1 forgets them)", e.Name(), ErrNotEmptied, why)
}

// leftOf is what keeps e from counting as empty now: the processes that
// served its models and are alive, and why ("" when nothing does). A
// look that could not read the processes shows nothing gone.
func (g *GPU) leftOf(ctx context.Context, c *Config, e LLMEngine, refused bool) ([]procs.Proc, string) {
	api := confirmedEmpty
	if refused {
		api = askServers
	}
	rec, t, err := g.lookAt(ctx, c, e, api)
	switch {
	case err != nil && ctx.Err() != nil:
		return g.leftCutShort(e, refused)
	case err != nil:
		left, _ := g.leftNow(e)
		return left, "its processes could not be read: " + err.Error()
	case refused && rec.Unseen && rec.Loaded():
		if g.cardShowsGone(ctx, c, rec) {
			return nil, ""
		}
		return nil, "it refuses connections, it had models loaded, and its processes cannot be seen from here (another user's, another container or host): only a card reading (vram_probe nvidia-smi) that no longer lists its compute processes shows them gone"
	case t == nil:
		return nil, "" // on another host: its API is the evidence
	case refused:
		if left := served.LeftRefused(rec, t); len(left) > 0 {
			return left, "it refuses connections, but what served its models is alive: " + procList(left)
		}
	default:
		if left := served.Left(rec, t); len(left) > 0 {
			return left, "its API lists no model, but what served its models is still alive: " + procList(left)
		}
	}
	return nil, ""
}

// leftCutShort is what keeps e from counting as empty when the look that
// was to tell could not end in time: what the last look found, or else
// what is remembered of it.
func (g *GPU) leftCutShort(e Engine, refused bool) ([]procs.Proc, string) {
	if left, why := g.leftNow(e); why != "" {
		return left, why
	}
	g.mu.Lock()
	rec := g.runLocked(e.Name()).served
	g.mu.Unlock()
	left := rec.Servers
	if refused && rec.Engine != nil {
		left = append([]procs.Proc{*rec.Engine}, left...)
	}
	if len(left) == 0 {
		return nil, ""
	}
	return left, "unload_timeout passed before its processes could be read; last seen alive: " + procList(left)
}

// servesAny reports whether processes were last seen serving e's models.
func (g *GPU) servesAny(e Engine) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.runLocked(e.Name()).served.Servers) > 0
}

// leftNow is what the status shows as left of e, and why.
func (g *GPU) leftNow(e Engine) ([]procs.Proc, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.runLocked(e.Name())
	return r.left, r.waitWhy
}

// cardShowsGone reports whether the card shows rec's engine's models gone:
// none of the compute processes seen while it had models is listed, or
// its used memory is down by their footprints.
func (g *GPU) cardShowsGone(ctx context.Context, c *Config, rec served.Record) bool {
	if c.CardProcesses != nil && len(rec.CardPIDs) > 0 {
		if on, err := c.CardProcesses(ctx); err == nil && !slices.ContainsFunc(rec.CardPIDs, func(pid int32) bool { _, ok := on[pid]; return ok }) {
			return true
		}
	}
	if c.CardUsed != nil && rec.Footprint > 0 && rec.CardUsed > 0 {
		if used, err := c.CardUsed(ctx); err == nil && used <= rec.CardUsed-rec.Footprint {
			return true
		}
	}
	return false
}

// setLeft records what is left of e's processes, and why it waits, for
// the status.
func (g *GPU) setLeft(e Engine, left []procs.Proc, why string) {
	g.mu.Lock()
	r := g.runLocked(e.Name())
	same := r.waitWhy == why && slices.EqualFunc(r.left, left, func(a, b procs.Proc) bool { return a.ID == b.ID })
	g.mu.Unlock()
	if same {
		return
	}
	g.withRun(e, func(r *engineRun) { r.left, r.waitWhy = left, why })
}

// processesLeft is the status's list of r's processes left.
func (r *engineRun) processesLeft() []ProcessLeft {
	if len(r.left) == 0 {
		return nil
	}
	out := make([]ProcessLeft, len(r.left))
	for i, p := range r.left {
		out[i] = ProcessLeft{PID: p.PID, Name: p.Name}
	}
	return out
}

// procList names processes for a message: "42 (llama-server), 43
// (python3)".
func procList(ps []procs.Proc) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = fmt.Sprintf("%d (%s)", p.PID, p.Name)
	}
	return strings.Join(names, ", ")
}

// OutcomeForgotten is the outcome of DELETE /gpu_turnstile/job?force=1
// when no job runs but LLM engines wait for their processes: what was
// remembered of them is forgotten.
const OutcomeForgotten = "processes_forgotten"

// ForgetProcesses is the operator's way past LLM engines that do not count
// as emptied because processes that served their models are alive, or
// cannot be seen gone: what is remembered of them is forgotten, and an
// emptying that waits for them goes on (the next look finds again only
// what the engine still runs as its own). It returns the engines
// concerned, by name; none if no engine waits for its processes.
func (g *GPU) ForgetProcesses(by string) []string {
	c := g.cfg()
	if c == nil {
		return nil
	}
	var names []string
	g.lookMu.Lock()
	defer g.lookMu.Unlock()
	for _, e := range c.LLMs {
		g.mu.Lock()
		r := g.runLocked(e.Name())
		held := r.waitWhy != ""
		if held {
			r.served, r.left, r.waitWhy = served.Record{At: time.Now()}, nil, ""
			g.touch()
		}
		g.mu.Unlock()
		if held {
			names = append(names, e.Name())
			g.saveServed(g.ctx, c, e, served.Record{At: time.Now()})
		}
	}
	if len(names) > 0 {
		g.log().Warn("the processes remembered of LLM engines are forgotten by an operator: they count as gone",
			zap.Strings("engines", names), zap.String("by", by))
	}
	return names
}

type forceKey struct{}

// withForce marks an emptying for a hold taken with "force".
func withForce(ctx context.Context) context.Context { return context.WithValue(ctx, forceKey{}, true) }

func forced(ctx context.Context) bool { f, _ := ctx.Value(forceKey{}).(bool); return f }
