package driver

import "context"

// Pauser is a sandbox with the pause facet (Capabilities.Pause).
type Pauser interface {
	// Pause freezes every process of the sandbox, those started later by
	// a command already running included: they keep their memory and
	// descriptors and use no CPU until Resume. Files stay readable and
	// writable. Pausing a paused sandbox succeeds.
	Pause(ctx context.Context) error
	// Resume thaws a paused sandbox; resuming one that is not paused
	// succeeds. Delete works on a paused sandbox.
	Resume(ctx context.Context) error
}
