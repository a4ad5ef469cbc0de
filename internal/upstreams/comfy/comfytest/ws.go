package comfytest

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/coder/websocket"
)

func (s *Server) broadcastStatus() {
	s.sendAll("status", map[string]any{"status": map[string]any{"exec_info": map[string]any{"queue_remaining": s.queueRemaining()}}})
}

// sendAll sends a message to every socket (but silenced ones).
func (s *Server) sendAll(typ string, data any) {
	msg, _ := json.Marshal(map[string]any{"type": typ, "data": data})
	s.mu.Lock()
	defer s.mu.Unlock()
	for sock := range s.sockets {
		if !sock.silent {
			select {
			case sock.out <- msg:
			default: // a slow socket misses a message, as with a full buffer
			}
		}
	}
}

// sendTo sends a message to the sockets of one client id; a job posted
// without one has nobody to tell.
func (s *Server) sendTo(clientID, typ string, data any) {
	if clientID == "" {
		return
	}
	msg, _ := json.Marshal(map[string]any{"type": typ, "data": data})
	s.mu.Lock()
	defer s.mu.Unlock()
	for sock := range s.sockets {
		if sock.id == clientID && !sock.silent {
			select {
			case sock.out <- msg:
			default:
			}
		}
	}
}

func (s *Server) ws(w http.ResponseWriter, r *http.Request) {
	if s.noSockets.Load() {
		http.Error(w, "websocket refused", http.StatusServiceUnavailable)
		return
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer conn.CloseNow()
	id := r.URL.Query().Get("clientId")
	if id == "" {
		id = newID()
	}
	sock := s.addSocket(id)
	first, _ := json.Marshal(map[string]any{"type": "status", "data": map[string]any{
		"status": map[string]any{"exec_info": map[string]any{"queue_remaining": s.queueRemaining()}}, "sid": id}})
	ctx := conn.CloseRead(r.Context())
	if conn.Write(ctx, websocket.MessageText, first) != nil {
		s.removeSocket(sock)
		return
	}
	s.forward(ctx, conn, sock)
}

// addSocket registers a socket for a client id.
func (s *Server) addSocket(id string) *socket {
	sock := &socket{id: id, out: make(chan []byte, 64)}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A new socket with the same id takes its messages; the old one stays
	// open and is sent nothing more, as in ComfyUI.
	for old := range s.sockets {
		if old.id == id {
			old.silent = true
		}
	}
	s.sockets[sock] = true
	return sock
}

// forward writes the socket's messages to its connection until the
// socket is closed (the connection is then closed as going away) or the
// connection fails or ends.
func (s *Server) forward(ctx context.Context, conn *websocket.Conn, sock *socket) {
	for {
		select {
		case msg, ok := <-sock.out:
			if !ok {
				conn.Close(websocket.StatusGoingAway, "server closing")
				return
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.Write(wctx, websocket.MessageText, msg)
			cancel()
			if err != nil {
				s.removeSocket(sock)
				return
			}
		case <-ctx.Done():
			s.removeSocket(sock)
			return
		}
	}
}

func (s *Server) removeSocket(sock *socket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sockets[sock] {
		close(sock.out)
		delete(s.sockets, sock)
	}
}
