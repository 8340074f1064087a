package docker_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain: every test here runs containers on the Docker engine, so
// `go test -short` (make test-short, the inner loop) runs none of them;
// make test runs them all.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("docker driver tests: not run with -short (they need the Docker engine; make test runs them)")
		os.Exit(0)
	}
	os.Exit(m.Run())
}
