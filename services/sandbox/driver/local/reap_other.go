//go:build !linux

package local

// Never reached off linux: Create refuses to make a sandbox.

const execMarkerVar = "FABRO_SANDBOX_EXEC"

func enableSubreaper() {}

type tree struct{}

func newTree(int, string) *tree { return &tree{} }
func (*tree) snapshot()         {}
func (*tree) sweep()            {}
func (*tree) close()            {}

func reapGroup(int) {}
