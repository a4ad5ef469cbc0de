package proctest

import (
	"encoding/json"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// runModel is a model server stand-in: it listens if asked, reports its
// PID and port, and exits StopDelay after SIGTERM or, with
// ExitOnStdinEOF, at the end of its standard input once its load has
// ended.
func runModel() {
	start := time.Now()
	var spec modelSpec
	if err := json.Unmarshal([]byte(os.Getenv(specEnv)), &spec); err != nil {
		os.Exit(2)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	rep := childReport{PID: os.Getpid()}
	if spec.Listen {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			os.Exit(2)
		}
		rep.Port = ln.Addr().(*net.TCPAddr).Port
		go refuseAll(ln)
	}
	report := os.NewFile(reportFD, "report")
	b, _ := json.Marshal(rep)
	report.Write(append(b, '\n'))
	report.Close()
	go func() {
		<-term
		time.Sleep(spec.StopDelay)
		os.Exit(0)
	}()
	if spec.ExitOnStdinEOF {
		go func() {
			io.Copy(io.Discard, os.Stdin)
			time.Sleep(time.Until(start.Add(spec.LoadFor)))
			os.Exit(0)
		}()
	}
	for {
		time.Sleep(time.Hour)
	}
}

// refuseAll accepts and closes every connection: what counts is that the
// port has a listener, not what it answers.
func refuseAll(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}
