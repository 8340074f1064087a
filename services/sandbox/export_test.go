package sandbox

// ReleaseForTest gives up the workspace root as a crashed process would,
// without deleting any sandbox.
func (s *Service) ReleaseForTest() { s.wsLock.Release() }
