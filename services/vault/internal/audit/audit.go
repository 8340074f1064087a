// Package audit appends one JSON line per vault read or write: who did what to
// which secret, and how it ended. Values are never part of an entry.
package audit

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Entry is one audited operation.
type Entry struct {
	Time    time.Time `json:"time"`
	Op      string    `json:"op"`              // put, get, list, delete, resolve, rotate, accept-rollback
	Caller  string    `json:"caller"`          // a service identity, or "admin"
	Names   []string  `json:"names,omitempty"` // the secrets concerned
	Version int64     `json:"version,omitempty"`
	Outcome string    `json:"outcome"`           // a gRPC code name, e.g. "OK", "NotFound"
	Sources []string  `json:"sources,omitempty"` // for resolve: where each value came from
}

// Log is an append-only audit file, safe for concurrent use.
type Log struct {
	mu  sync.Mutex
	f   *os.File
	now func() time.Time
}

// Open opens (or creates) the audit file for appending.
func Open(file string) (*Log, error) {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	return &Log{f: f, now: time.Now}, nil
}

// Record appends e, stamping its time. One write per entry keeps lines whole
// under O_APPEND even if several processes share the file.
func (l *Log) Record(e Entry) error {
	e.Time = l.now().UTC()
	line, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode audit entry: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("write audit log: %w", err)
	}
	return nil
}

// Close closes the file.
func (l *Log) Close() error { return l.f.Close() }
