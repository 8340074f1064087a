package agent

import (
	"sync"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
)

// hub hands every committed event of every session to the tree
// subscriptions that watch it, in commit order across sessions.
type hub struct {
	mu   sync.Mutex
	subs map[*treeSub]struct{}
}

// subscribe watches the sessions given (a session and its known
// descendants) and every session created below them from now on.
func (h *hub) subscribe(watched string, descendants ...string) *treeSub {
	s := &treeSub{hub: h, watched: watched, members: map[string]bool{watched: true}}
	for _, id := range descendants {
		s.members[id] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs == nil {
		h.subs = map[*treeSub]struct{}{}
	}
	h.subs[s] = struct{}{}
	return s
}

// commit is every session log's commit observer.
func (h *hub) commit(ev *agentv1.AgentEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.offer(ev)
	}
}

// fail is every session log's failure observer: subscriptions watching
// that session end with the failure.
func (h *hub) fail(sessionID string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.watched == sessionID {
			s.Fail(err)
		}
	}
}

// treeSub is a live subscription to a session and its descendants, with
// an unbounded queue so a slow reader never blocks a session.
type treeSub struct {
	bus.Queue
	hub     *hub
	watched string
	members map[string]bool // guarded by hub.mu
}

// offer queues ev when it belongs to the watched tree; hub.mu is held.
func (s *treeSub) offer(ev *agentv1.AgentEvent) {
	if !s.members[ev.GetSessionId()] {
		if !s.members[ev.GetParentSessionId()] || ev.GetParentSessionId() == "" {
			return
		}
		s.members[ev.GetSessionId()] = true // a new child: its first event names its parent
	}
	s.Push(ev)
}

// Close ends the subscription.
func (s *treeSub) Close() {
	s.hub.mu.Lock()
	delete(s.hub.subs, s)
	s.hub.mu.Unlock()
}

// isDelta reports the streaming events a subagent's watchers do not get.
func isDelta(ev *agentv1.AgentEvent) bool {
	switch ev.GetEvent().(type) {
	case *agentv1.AgentEvent_TextDelta, *agentv1.AgentEvent_ReasoningDelta, *agentv1.AgentEvent_ToolCallOutputDelta:
		return true
	}
	return false
}

// descendants lists the ids of every session below id, known to the
// service.
func (s *Service) descendants(id string) []string {
	s.mu.Lock()
	children := map[string][]string{}
	for cid, c := range s.sessions {
		if p := c.info.GetParentSessionId(); p != "" {
			children[p] = append(children[p], cid)
		}
	}
	s.mu.Unlock()
	var out []string
	queue := []string{id}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		out = append(out, children[next]...)
		queue = append(queue, children[next]...)
	}
	return out
}
