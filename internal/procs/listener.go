package procs

import (
	"context"

	"github.com/shirou/gopsutil/v4/net"
)

// Listening is what Listener found on a port.
type Listening uint8

const (
	// Nobody listens on the port.
	Nobody Listening = iota
	// Seen: a process listens, and its PID is known.
	Seen
	// Unseen: something listens, but its PID cannot be read (another
	// user's process without CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE, a
	// /proc mounted with hidepid, another PID namespace).
	Unseen
)

// String names l for logs and the status.
func (l Listening) String() string {
	switch l {
	case Seen:
		return "seen"
	case Unseen:
		return "unseen"
	}
	return "nobody"
}

// Listener finds the process listening on TCP port on this host (any
// local address, IPv4 or IPv6).
func Listener(ctx context.Context, port uint32) (pid int32, l Listening, err error) {
	conns, err := net.ConnectionsWithContext(ctx, "tcp")
	if err != nil {
		return 0, Nobody, err
	}
	return listenerIn(conns, port)
}

// listenerIn finds port's listener among conns.
func listenerIn(conns []net.ConnectionStat, port uint32) (int32, Listening, error) {
	l := Nobody
	for _, c := range conns {
		if c.Status != "LISTEN" || c.Laddr.Port != port {
			continue
		}
		if c.Pid > 0 {
			return c.Pid, Seen, nil
		}
		l = Unseen
	}
	return 0, l, nil
}
