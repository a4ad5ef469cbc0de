package procs

import (
	"context"
	"fmt"
	"slices"

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
func Listener(ctx context.Context, port int) (pid int32, l Listening, err error) {
	ls, err := Listeners(ctx, []int{port})
	if err != nil {
		return 0, Nobody, err
	}
	return listenerOf(ls[port])
}

// listenerOf is what the listening PIDs of one port say: a PID of 0 is a
// process that cannot be seen.
func listenerOf(pids []int32) (int32, Listening, error) {
	l := Nobody
	for _, pid := range pids {
		if pid > 0 {
			return pid, Seen, nil
		}
		l = Unseen
	}
	return 0, l, nil
}

// Listeners maps each of ports that something listens on (TCP) to the
// listening processes; a PID of 0 is a process this one may not see. It
// reads the host's sockets once, whatever the number of ports.
func Listeners(ctx context.Context, ports []int) (map[int][]int32, error) {
	out := map[int][]int32{}
	if len(ports) == 0 {
		return out, nil
	}
	conns, err := net.ConnectionsWithContext(ctx, "tcp")
	if err != nil {
		return nil, fmt.Errorf("listing TCP sockets: %w", err)
	}
	return listenersIn(conns, ports), nil
}

// listenersIn is Listeners over conns.
func listenersIn(conns []net.ConnectionStat, ports []int) map[int][]int32 {
	out := map[int][]int32{}
	for _, c := range conns {
		port := int(c.Laddr.Port)
		if c.Status != "LISTEN" || !slices.Contains(ports, port) || slices.Contains(out[port], c.Pid) {
			continue
		}
		out[port] = append(out[port], c.Pid)
	}
	return out
}
