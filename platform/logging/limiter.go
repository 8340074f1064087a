package logging

import (
	"sync"
	"time"
)

// Limiter lets one log line through per Interval and counts the ones it
// held back, so a failure that repeats on every call (an unreadable token
// store, a failing export) is logged once a minute, not once a call. It
// is safe for concurrent use.
type Limiter struct {
	Interval time.Duration // zero: a minute

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Allow reports whether to log now, and how many lines it held back since
// the last one it let through.
func (l *Limiter) Allow() (ok bool, suppressed int) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	interval := l.Interval
	if interval == 0 {
		interval = time.Minute
	}
	if !l.last.IsZero() && now.Sub(l.last) < interval {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}
