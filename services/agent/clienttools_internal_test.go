package agent

import (
	"strconv"
	"testing"
)

// TestEndedClientCallsAreBounded: a session remembers its most recent ended
// client calls (for FAILED_PRECONDITION on a late answer), not all of them,
// and never drops a live one.
func TestEndedClientCallsAreBounded(t *testing.T) {
	cc := &clientCalls{calls: map[string]*clientCall{}}
	cc.calls["live"] = &clientCall{answer: make(chan clientAnswer, 1)}
	for i := range maxResolvedClientCalls + 10 {
		id := strconv.Itoa(i)
		cc.calls[id] = &clientCall{answered: true}
		cc.forget(id)
	}
	cc.resolved = append([]string{"live"}, cc.resolved...) // as if its id had ended once before
	cc.forget("x")
	if len(cc.calls) > maxResolvedClientCalls+1 {
		t.Errorf("%d calls remembered; want at most %d ended ones and the live one", len(cc.calls), maxResolvedClientCalls)
	}
	if _, ok := cc.calls["live"]; !ok {
		t.Error("a live call was dropped")
	}
	if _, ok := cc.calls[strconv.Itoa(maxResolvedClientCalls+9)]; !ok {
		t.Error("the newest ended call was dropped")
	}
}
