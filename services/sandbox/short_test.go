package sandbox_test

import "testing"

// dockerDrivers is the drivers a test runs on: local, and docker but
// under -short (make test-short, the inner loop, runs no container).
func dockerDrivers(drivers ...string) []string {
	if !testing.Short() {
		return drivers
	}
	var out []string
	for _, d := range drivers {
		if d != "docker" {
			out = append(out, d)
		}
	}
	return out
}

// needsDocker skips t under -short: it runs containers, which make test
// runs and make test-short leaves out.
func needsDocker(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs containers on the Docker engine: make test runs it, -short does not")
	}
}
