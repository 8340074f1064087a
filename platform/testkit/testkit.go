// Package testkit holds what the repository's tests share: waiting for a
// condition that another goroutine or process brings about.
package testkit

import (
	"testing"
	"time"
)

// Eventually calls check until it returns nil, and fails the test with
// check's last error when timeout passes first: a timeout says what it last
// saw, not only that it waited. The first call is immediate; the pauses
// between calls grow from 1 ms to 50 ms. Inside a testing/synctest bubble
// the pauses are the bubble's fake time.
//
// Call it from the test's goroutine (it calls t.Fatalf).
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for {
		err := check()
		if err == nil {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("not so after %v: %v", timeout, err)
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Millisecond))
		pause = min(2*pause, 50*time.Millisecond)
	}
}
