package eta

import "time"

// Kind is what holds, or waits for, the GPU.
type Kind uint8

// The kinds of users of the GPU.
const (
	None     Kind = iota // nobody holds the GPU
	LLM                  // LLM requests
	Job                  // an image job
	Hold                 // an external hold, with a lease
	Presence             // a presence hold (hold_while): no lease, it ends when its condition clears
)

// Holder is what holds the GPU now.
type Holder struct {
	Kind     Kind
	Engine   string    // a job's image engine
	Workflow string    // a job's workflow signature, "" if none
	Started  time.Time // when the job had the GPU
	// Ran is when the job's engine had the GPU, the LLM engines emptied
	// and the engine readied; zero while that is under way.
	Ran time.Time
	// Expires is a hold's lease end; zero for none.
	Expires time.Time
}

// LLMEngine is what the steps between users need to know of one LLM
// engine now.
type LLMEngine struct {
	Name string
	// Loaded is set while the engine may hold models: it is emptied
	// before the next exclusive user.
	Loaded bool
	// Asleep is set while the engine was put to sleep: it is woken
	// before LLM use.
	Asleep bool
	// Sleeps is set for an engine that is put to sleep, not unloaded, for
	// exclusive use (it then needs a wake).
	Sleeps bool
}

// Waiter is one exclusive waiter: an image job or a hold.
type Waiter struct {
	Kind     Kind   // Job, Hold or Presence
	Engine   string // a job's image engine
	Workflow string // a job's workflow signature
	// Lease is a hold's lease, the longest it keeps the GPU unless
	// renewed; zero for unknown.
	Lease time.Duration
}

// Situation is what Predict starts from: the GPU and its queue at one
// instant.
type Situation struct {
	Now    time.Time
	Holder Holder
	// Freeing is set while the free after the last exclusive user runs.
	Freeing bool
	// OwesFree are the image engines freed before LLM use.
	OwesFree []string
	LLMs     []LLMEngine
	// Queue are the exclusive waiters in the order they queued; Predict
	// puts the presence holds first, as the lock does.
	Queue []Waiter
	// LLMWaiting is set when LLM requests wait (or one would, for the
	// prediction of a request arriving now).
	LLMWaiting bool
	// Streak is the lock's count of exclusive grants in a row while LLM
	// requests waited; MaxStreak its bound (max_image_streak, 0: none).
	Streak, MaxStreak int
}

// Place is one waiter's (or the LLM waiters') place: its position in
// the order the lock serves (1 = next), and its expected start, zero
// when it cannot be predicted (a figure not learned yet, a presence
// hold's end).
type Place struct {
	Position int
	Start    time.Time
}

// Known reports whether the start could be predicted.
func (p Place) Known() bool { return !p.Start.IsZero() }

// Prediction is the place of each exclusive waiter, in Situation.Queue's
// order, and of the LLM waiters, which the lock admits together (the
// zero Place if LLMWaiting was not set).
type Prediction struct {
	Queue []Place
	LLM   Place
}

// Predict walks the queue from s as the lock will serve it, timing each
// user and step with what l learned. Steps never measured (an engine
// never unloaded, freed or woken) count as instant; a job whose run time
// is unknown (no job ended yet), a hold without a lease and a presence
// hold leave every start after them unknown. LLM requests in flight are
// counted as ending at once: their length is not known in advance.
func Predict(l *Learned, s Situation) Prediction {
	if l == nil {
		l = &Learned{}
	}
	p := &walk{l: l, s: s, t: s.Now, known: true, streak: s.Streak, llmWaiting: s.LLMWaiting,
		owes: map[string]bool{}, pos: 1, out: Prediction{Queue: make([]Place, len(s.Queue))}}
	for _, e := range s.OwesFree {
		p.owes[e] = true
	}
	for _, e := range s.LLMs {
		p.asleep = p.asleep || e.Asleep
	}
	p.order = servingOrder(s.Queue)
	p.run()
	return p.out
}

// servingOrder is the indices of q in the order the lock queues them:
// presence holds first, each group in arrival order.
func servingOrder(q []Waiter) []int {
	order := make([]int, 0, len(q))
	for i, w := range q {
		if w.Kind == Presence {
			order = append(order, i)
		}
	}
	for i, w := range q {
		if w.Kind != Presence {
			order = append(order, i)
		}
	}
	return order
}

// walk is one run of Predict.
type walk struct {
	l     *Learned
	s     Situation
	t     time.Time // when the next thing happens
	known bool      // t is known
	pos   int       // the next position given
	order []int     // the queue left, as indices of s.Queue
	out   Prediction

	streak     int
	llmWaiting bool
	owes       map[string]bool // image engines owing a free
	asleep     bool            // an LLM engine sleeps and is woken before LLM use
	unloadDue  bool            // the LLM engines hold models: emptied before exclusive use
}

func (p *walk) run() {
	releasing := p.holderRest()
	for _, e := range p.s.LLMs {
		p.unloadDue = p.unloadDue || e.Loaded
	}
	if p.s.Freeing {
		releasing = true
		p.payFree()
	}
	for {
		if !releasing {
			// From LLM use or idle: the next exclusive waiter has the GPU
			// once the LLM requests in flight drain.
			if len(p.order) == 0 {
				if p.llmWaiting {
					p.llmTurn()
				}
				return
			}
			p.grant()
			releasing = true
			continue
		}
		if len(p.order) > 0 && p.exclusiveTurn() {
			p.grant() // handed over: no free, the LLM engines are empty
			continue
		}
		if len(p.owes) > 0 || p.asleep {
			p.payFree()
			continue // the lock looks at its queue again after the free
		}
		releasing = false
		if p.llmWaiting {
			p.llmTurn()
		}
	}
}

// holderRest moves t past what holds the GPU now, and reports whether
// that is an exclusive user (which releases the GPU then).
func (p *walk) holderRest() bool {
	h := p.s.Holder
	switch h.Kind {
	case Job:
		p.owes[h.Engine] = true
		run, ok := p.l.JobTime(h.Workflow)
		if !ok {
			p.unknown()
			return true
		}
		if h.Ran.IsZero() {
			ready := p.unloadTime(true) + p.step(h.Engine, Prepare)
			p.after(max(ready-p.s.Now.Sub(h.Started), 0) + run)
		} else {
			p.after(max(run-p.s.Now.Sub(h.Ran), 0))
		}
		p.sleepAfterUnload()
		return true
	case Hold:
		if h.Expires.IsZero() {
			p.unknown()
		} else {
			p.after(max(h.Expires.Sub(p.s.Now), 0))
		}
		p.sleepAfterUnload()
		return true
	case Presence:
		p.unknown()
		return true
	}
	return false
}

// exclusiveTurn is the lock's rule: the first exclusive waiter goes
// before the LLM waiters if it is a presence hold, or unless the streak
// bound gives them a turn.
func (p *walk) exclusiveTurn() bool {
	if p.s.Queue[p.order[0]].Kind == Presence {
		return true
	}
	return !(p.s.MaxStreak > 0 && p.llmWaiting && p.streak >= p.s.MaxStreak)
}

// grant gives the GPU to the first exclusive waiter at t and moves t
// past its use.
func (p *walk) grant() {
	i := p.order[0]
	p.order = p.order[1:]
	p.out.Queue[i] = p.place()
	if p.llmWaiting {
		p.streak++
	}
	w := p.s.Queue[i]
	unload := p.unloadTime(p.unloadDue)
	if p.unloadDue {
		p.sleepAfterUnload()
	}
	p.unloadDue = false
	switch w.Kind {
	case Job:
		p.owes[w.Engine] = true
		run, ok := p.l.JobTime(w.Workflow)
		if !ok {
			p.unknown()
			return
		}
		p.after(unload + p.step(w.Engine, Prepare) + run)
	case Hold:
		if w.Lease <= 0 {
			p.unknown()
			return
		}
		p.after(unload + w.Lease)
	default:
		p.unknown()
	}
}

// llmTurn admits the LLM waiters at t: they load models, which the next
// exclusive user has emptied.
func (p *walk) llmTurn() {
	if p.out.LLM.Position == 0 {
		p.out.LLM = p.place()
	}
	p.llmWaiting, p.streak, p.unloadDue = false, 0, true
}

// payFree moves t past the free of the image engines owed one and the
// wake of the LLM engines asleep, which run one after the other.
func (p *walk) payFree() {
	var d time.Duration
	for e := range p.owes {
		d += p.step(e, Free)
	}
	if p.asleep {
		for _, e := range p.s.LLMs {
			if e.Sleeps || e.Asleep {
				d += p.step(e.Name, Wake)
			}
		}
	}
	clear(p.owes)
	p.asleep = false
	p.after(d)
}

// unloadTime is how long emptying the LLM engines takes, if due: they
// are emptied all at once.
func (p *walk) unloadTime(due bool) time.Duration {
	if !due {
		return 0
	}
	var d time.Duration
	for _, e := range p.s.LLMs {
		d = max(d, p.step(e.Name, Unload))
	}
	return d
}

// sleepAfterUnload records that the engines that sleep for exclusive use
// are asleep once it has them.
func (p *walk) sleepAfterUnload() {
	for _, e := range p.s.LLMs {
		p.asleep = p.asleep || e.Sleeps
	}
}

// step is engine's step time, 0 if never measured.
func (p *walk) step(engine string, s Step) time.Duration {
	d, _ := p.l.StepTime(engine, s)
	return d
}

func (p *walk) place() Place {
	pl := Place{Position: p.pos}
	p.pos++
	if p.known {
		pl.Start = p.t
	}
	return pl
}

func (p *walk) after(d time.Duration) { p.t = p.t.Add(d) }

func (p *walk) unknown() { p.known = false }
