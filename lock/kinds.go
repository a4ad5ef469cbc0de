package lock

// State is what the GPU is used for.
type State uint8

// The states, in the order of the gpu_turnstile_state metric.
const (
	Idle  State = iota // nobody holds the lock
	LLM                // one or more shared holders
	Image              // one exclusive image holder (or its free)
	Hold               // one exclusive hold (external or presence)
)

// States lists every State; the model checker's state list is compared
// against it.
var States = []State{Idle, LLM, Image, Hold}

func (s State) String() string {
	switch s {
	case Idle:
		return "idle"
	case LLM:
		return "llm"
	case Image:
		return "image"
	case Hold:
		return "hold"
	}
	return "unknown"
}

// Kind is the kind of an exclusive holder: an image job, an external hold
// or a presence hold. It is its own type, so that neither Idle nor LLM can
// be passed where an exclusive kind is wanted.
type Kind uint8

// The kinds of exclusive holders. The two holds differ only in where they
// queue: both put the lock in state Hold, so whatever goes by the state (a
// status, the metrics) shows "hold" for either and need not know the
// presence kind; Kind.String tells them apart.
const (
	// ImageJob is an image job: state Image, served in arrival order.
	ImageJob = Kind(Image)
	// ExternalHold is an external holder's lease (a training run, a
	// game): state Hold, served in arrival order.
	ExternalHold = Kind(Hold)
	// PresenceHold is a hold for the person at the machine (a game
	// started there): state Hold, queued ahead of every image job and
	// external hold that waits, behind earlier presence holds.
	PresenceHold = Kind(Hold + 1)
)

// State is the state an exclusive holder of this kind puts the lock in.
func (k Kind) State() State {
	if k == PresenceHold {
		return Hold
	}
	return State(k)
}

func (k Kind) String() string {
	if k == PresenceHold {
		return "presence"
	}
	return k.State().String()
}

func (k Kind) valid() bool { return k == ImageJob || k == ExternalHold || k == PresenceHold }
