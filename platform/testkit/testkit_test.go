package testkit_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fabro-sh/fabro-go/platform/testkit"
)

// recorder is a testing.TB whose Fatalf records its message and ends the
// calling goroutine, as the real one does.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventually(t *testing.T) {
	t.Run("returns once check holds", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var n atomic.Int32
			start := time.Now()
			testkit.Eventually(t, time.Minute, func() error {
				if n.Add(1) < 5 {
					return errors.New("not yet")
				}
				return nil
			})
			if n.Load() != 5 {
				t.Errorf("check called %d times, want 5", n.Load())
			}
			if d := time.Since(start); d >= time.Minute {
				t.Errorf("took %v", d)
			}
		})
	})
	t.Run("fails with the last error at the timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			r := &recorder{TB: t}
			var n int
			start := time.Now()
			done := make(chan struct{})
			go func() {
				defer close(done)
				testkit.Eventually(r, 10*time.Second, func() error { n++; return fmt.Errorf("saw %d", n) })
			}()
			<-done
			if d := time.Since(start); d < 10*time.Second || d > 11*time.Second {
				t.Errorf("failed after %v, want 10 s", d)
			}
			if want := fmt.Sprintf("saw %d", n); !strings.Contains(r.msg, want) {
				t.Errorf("failure %q does not name the last error %q", r.msg, want)
			}
		})
	})
}
