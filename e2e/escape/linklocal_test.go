package escape

import (
	"os/exec"
	"strings"
	"testing"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// TestNoLinkLocal: a sandbox allowed the network reaches no link-local
// address (169.254.0.0/16: a cloud host's metadata service, which hands
// out the instance's credentials); the host routes them, slirp4netns and
// Docker's bridge forwarded them.
func TestNoLinkLocal(t *testing.T) {
	s := rootServe(t)
	if out, err := exec.Command("ip", "route", "get", "169.254.169.254").CombinedOutput(); err != nil || strings.Contains(string(out), "unreachable") {
		t.Fatalf("the plant: the host itself does not route 169.254.169.254: %v %s", err, out)
	}
	for _, drv := range []string{"bwrap", "docker"} {
		t.Run(drv, func(t *testing.T) {
			if !s.available(t, drv) {
				if drv == "docker" {
					t.Skip("no Docker engine with the sandbox image here (make sandbox-image)")
				}
				t.Fatalf("driver %s is not available on a root fabro serve", drv)
			}
			sb := s.create(t, &sandboxv1.SandboxSpec{Driver: drv, Limits: &sandboxv1.ResourceLimits{Network: sandboxv1.NetworkPolicy_NETWORK_POLICY_ALLOW}})
			for _, addr := range []string{"169.254.169.254/80", "169.254.1.1/443"} {
				r := s.exec(t, sb, "timeout 5 bash -c 'exec 3<>/dev/tcp/"+addr+"' && echo connected")
				if e := string(r.GetStderr()); strings.Contains(string(r.GetStdout()), "connected") || !strings.Contains(e, "No route to host") && !strings.Contains(e, "unreachable") {
					t.Errorf("%s from a %s sandbox allowed the network: %q %q; want the network unreachable", addr, drv, r.GetStdout(), r.GetStderr())
				}
			}
		})
	}
}
