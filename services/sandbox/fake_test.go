package sandbox_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/fake"
)

// TestFakeDriver shows the fake through the service, as other services'
// tests use it: scripted results out, recorded commands and writes in.
func TestFakeDriver(t *testing.T) {
	code := 2
	fd := &fake.Driver{
		Seed: map[string]string{"README.md": "hello\nworld\n"},
		Exec: func(s driver.ExecSpec) driver.ExecResult {
			return driver.ExecResult{Termination: driver.Exited, ExitCode: &code, Stdout: []byte("ran " + s.Command)}
		},
	}
	h := start(t, fd)
	ctx := t.Context()
	id := h.create(t, &sandboxv1.SandboxSpec{Driver: "fake"}).GetSandboxId()
	if _, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: "src/a.go", Content: []byte("package a\n")}); err != nil {
		t.Fatal(err)
	}
	res, err := h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "go test ./..."}})
	if err != nil || res.GetResult().GetExitCode() != 2 || string(res.GetResult().GetStdout()) != "ran go test ./..." {
		t.Fatalf("Exec = %v, %v", res, err)
	}
	grep, err := h.client.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "wor"})
	if err != nil || len(grep.GetMatches()) != 1 || grep.GetMatches()[0].GetPath() != "README.md" {
		t.Errorf("Grep = %v, %v", grep, err)
	}
	sb := fd.Sandboxes()[0]
	if diff := cmp.Diff([]string{"src/a.go"}, sb.Written()); diff != "" {
		t.Errorf("written (-want +got):\n%s", diff)
	}
	if got := sb.Commands(); len(got) != 1 || got[0].Command != "go test ./..." {
		t.Errorf("commands = %v", got)
	}
}
