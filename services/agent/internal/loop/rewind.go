package loop

import llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"

// Truncate cuts the history to its first n messages (a checkpoint's
// rewind with conversation) and returns the history kept; false when n
// is out of range. The caller makes sure no prompt runs.
func (a *Agent) Truncate(n int) ([]*llmv1.Message, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n < 0 || n > len(a.history) {
		return nil, false
	}
	a.history = a.history[:n:n]
	return append([]*llmv1.Message(nil), a.history...), true
}
