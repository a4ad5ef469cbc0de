package proctest

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// frontProcess is the front as it runs in its own process.
type frontProcess struct {
	spec frontSpec
	out  *json.Encoder
	outM sync.Mutex

	mu       sync.Mutex
	children map[int]*spawned // by spawn ID
}

// runFront listens on the spec's port, reports it, forwards every request
// to the backend, obeys the test process's commands, and exits at the end
// of its standard input or, at SIGTERM, once it has drained and stopped
// its children.
func runFront() {
	f := &frontProcess{out: json.NewEncoder(os.Stdout), children: map[int]*spawned{}}
	if err := json.Unmarshal([]byte(os.Getenv(specEnv)), &f.spec); err != nil {
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", itoa(f.spec.Port)))
	if err != nil {
		f.send(message{Err: err.Error()})
		os.Exit(2)
	}
	closed := make(chan struct{})
	ln = &notifyListener{Listener: ln, closed: closed}
	srv := &http.Server{Handler: newForwarder(f.spec.Backend)}
	go srv.Serve(ln)
	f.send(message{Port: ln.Addr().(*net.TCPAddr).Port})
	go func() {
		f.commands(os.Stdin)
		os.Exit(0)
	}()
	<-term
	f.terminate(srv, closed)
}

// terminate is llama-swap's SIGTERM: the port closes at once, the requests
// in flight are served until they end (at most the drain limit), then the
// children get SIGTERM and are waited for.
func (f *frontProcess) terminate(srv *http.Server, closed <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), f.spec.DrainLimit)
	defer cancel()
	drained := make(chan struct{})
	go func() {
		srv.Shutdown(ctx)
		close(drained)
	}()
	<-closed
	f.send(message{Closed: true})
	<-drained
	srv.Close()
	f.mu.Lock()
	children := make([]*spawned, 0, len(f.children))
	for _, c := range f.children {
		children = append(children, c)
	}
	f.mu.Unlock()
	for _, c := range children {
		c.term()
	}
	for _, c := range children {
		<-c.done
	}
}

// commands runs the test process's commands until its end of file.
func (f *frontProcess) commands(r io.Reader) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var c command
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			continue
		}
		switch c.Op {
		case "spawn":
			f.send(f.spawn(c.ID, c.Spawn))
		case "close-stdin":
			f.mu.Lock()
			ch := f.children[c.Child]
			f.mu.Unlock()
			m := message{ID: c.ID}
			if ch == nil {
				m.Err = "no such child"
			} else {
				ch.stdin.Close()
			}
			f.send(m)
		}
	}
}

// send writes one message to the test process.
func (f *frontProcess) send(m message) {
	f.outM.Lock()
	defer f.outM.Unlock()
	f.out.Encode(m)
}

// notifyListener closes closed when it is closed.
type notifyListener struct {
	net.Listener
	closed chan struct{}
	once   sync.Once
}

func (l *notifyListener) Close() error {
	err := l.Listener.Close()
	l.once.Do(func() { close(l.closed) })
	return err
}

// reportTimeout bounds the wait for a model server's report.
const reportTimeout = 20 * time.Second
