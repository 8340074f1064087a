package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestPythonSDK runs sdk/python's tests (Debian's python3 with
// python3-grpcio and python3-protobuf, installed by make deps) against a
// real fabro serve: tokens, the error details of gRPC and REST failures,
// and a session's events over gRPC and as REST's NDJSON lines.
func TestPythonSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server and a Python interpreter")
	}
	python := "/usr/bin/python3"
	if out, err := exec.Command(python, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		t.Fatalf("Debian's python3 with grpcio and protobuf is needed (make deps): %v\n%s", err, out)
	}
	_, overlay := scriptedAnthropic(t)
	ws, data := t.TempDir(), t.TempDir()
	s := startServe(t, data, "FABRO_LLM_CATALOG_OVERLAY="+overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS="+ws)
	sdk, err := filepath.Abs(filepath.Join("..", "..", "sdk", "python"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, "-B", "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	cmd.Dir = sdk
	cmd.Env = append(os.Environ(), "PYTHONPATH="+sdk, "PYTHONDONTWRITEBYTECODE=1", "FABRO_TOKEN=",
		"FABRO_DATA_DIR="+s.dataDir, "FABRO_TEST_GRPC="+s.grpcAddr, "FABRO_TEST_REST="+s.httpAddr, "FABRO_TEST_WORKSPACE="+ws)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("sdk/python tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
