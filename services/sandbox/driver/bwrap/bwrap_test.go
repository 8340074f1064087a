package bwrap_test

import (
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
)

// TestConformance runs the whole contract suite against the plugin binary,
// through the host code the service uses.
func TestConformance(t *testing.T) {
	plugintest.Run(t, pluginBinary(t))
}
