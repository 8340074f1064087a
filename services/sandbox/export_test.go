package sandbox

import "time"

// ReleaseForTest gives up the data directory as a crashed process would,
// without deleting any sandbox.
func (s *Service) ReleaseForTest() { s.reg.close() }

// SetReviveEveryForTest lets a test retry reopening at once.
func SetReviveEveryForTest(d time.Duration) { reviveEvery = d }
