package bwrap

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestEnvStaysInside: the caller's variables reach the command through
// bwrap's --setenv, after --clearenv, never the environment of the host-side
// bwrap process (where LD_PRELOAD would load a library the command wrote).
func TestEnvStaysInside(t *testing.T) {
	got := envArgs([]string{"PATH=/usr/bin", "HOME=/ws"}, map[string]string{"LD_PRELOAD": "/ws/evil.so", "A": "x=y"})
	want := []string{"--clearenv", "--setenv", "PATH", "/usr/bin", "--setenv", "HOME", "/ws", "--setenv", "A", "x=y", "--setenv", "LD_PRELOAD", "/ws/evil.so"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("envArgs (-want +got):\n%s", d)
	}
	if !slices.Equal(hostEnv, []string{"PATH=/usr/bin:/bin"}) {
		t.Errorf("the host-side environment is %q; it must hold nothing of the caller's", hostEnv)
	}
}
