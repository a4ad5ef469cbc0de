// Package admit bounds what a request does before it has the GPU. One
// deadline, counted from the request's arrival (Caddy's start time),
// covers both the reading of its body into memory and its wait in the
// queue: a client that trickles its body is answered at the deadline like
// one whose body came at once.
//
// The body is read on the request's goroutine, with a timer that keeps
// the deadline while a read blocks (one already there costs no other
// goroutine). Caddy pushes the connection's read deadline
// forward on every read (read_body_idle), so no server timeout stops a
// body that arrives a byte at a time; at the deadline the read is cut
// with a read deadline set through http.ResponseController, and the
// answer asks the client to close the connection, whose body's rest is
// never read.
//
// What the waiting requests of one GPU buffer is bounded by its Budget
// (wait_buffer_limit, max_waiting): Budget.Admit reads a body into memory
// within it, or turns the request away with an *OverloadError, whose
// refused body is drained so that the client reads the busy answer. A
// Ticket is an admitted request's place and body; its Waiter is what the
// status shows of it. Forward is an image job's forward for
// gpu.RunImage: the answer passes through unchanged while its status and
// prompt_id are kept.
package admit
