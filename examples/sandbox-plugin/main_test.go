package main

import (
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
)

// TestConformance builds this plugin (GOWORK=off) and runs the contract
// suite against the binary: what a plugin author runs in their CI.
func TestConformance(t *testing.T) {
	plugintest.Run(t, plugintest.Build(t, "."))
}
