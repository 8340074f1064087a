package sandbox

// ReleaseForTest gives up the data directory as a crashed process would,
// without deleting any sandbox.
func (s *Service) ReleaseForTest() { s.reg.close() }
