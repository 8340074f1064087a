package logging_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/fabro-sh/fabro-go/platform/logging"
)

func TestLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &logging.Limiter{Interval: time.Minute}
		type step struct {
			after      time.Duration // since the previous step
			ok         bool
			suppressed int
		}
		for i, s := range []step{
			{0, true, 0},                 // the first line
			{time.Second, false, 0},      // within the minute: held
			{30 * time.Second, false, 0}, // still within it
			{29 * time.Second, true, 2},  // a minute after the first: through, saying 2 held
			{59 * time.Second, false, 0}, // within the new minute
			{time.Second, true, 1},       // exactly an interval later
			{time.Hour, true, 0},         // long quiet: nothing held
		} {
			time.Sleep(s.after)
			ok, n := l.Allow()
			if ok != s.ok || n != s.suppressed {
				t.Errorf("step %d (+%v): Allow() = %v, %d; want %v, %d", i, s.after, ok, n, s.ok, s.suppressed)
			}
		}
	})
}
