package sandbox_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/docker"
)

// TestPauseSandbox: a paused docker sandbox says PAUSED, its process makes
// no progress, Exec and StartProcess are SANDBOX_PAUSED while files work;
// resumed it runs on. Over REST too. A driver without the facet (local)
// refuses it with CAPABILITY_UNSUPPORTED naming the facet.
func TestPauseSandbox(t *testing.T) {
	needsDocker(t)
	d := docker.New(docker.Config{WorkspaceRoot: t.TempDir(), Owner: "fabro-test-" + t.Name()})
	defer d.Close()
	h := start(t, d)
	ctx := t.Context()
	sb := h.create(t, &sandboxv1.SandboxSpec{Driver: "docker"})
	id := sb.GetSandboxId()
	if !sb.GetCapabilities().GetPause() {
		t.Fatalf("docker states no pause: %v", sb.GetCapabilities())
	}
	pid := h.startProc(t, id, &sandboxv1.ProcessSpec{Command: `while :; do echo tick; sleep 0.01; done`})
	size := func() int64 {
		resp, err := h.client.ListProcesses(ctx, &sandboxv1.ListProcessesRequest{SandboxId: id})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range resp.GetProcesses() {
			if p.GetProcessId() == pid {
				return p.GetOutputBytes()
			}
		}
		t.Fatalf("no process %s", pid)
		return 0
	}
	for size() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := h.client.PauseSandbox(ctx, &sandboxv1.PauseSandboxRequest{SandboxId: id})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetSandbox().GetState(); got != sandboxv1.SandboxState_SANDBOX_STATE_PAUSED {
		t.Errorf("PauseSandbox's sandbox state %v; want PAUSED", got)
	}
	if g, err := h.client.GetSandbox(ctx, &sandboxv1.GetSandboxRequest{SandboxId: id}); err != nil || g.GetSandbox().GetState() != sandboxv1.SandboxState_SANDBOX_STATE_PAUSED {
		t.Errorf("GetSandbox while paused: %v, %v", g.GetSandbox().GetState(), err)
	}
	before := size()
	time.Sleep(300 * time.Millisecond)
	if after := size(); after != before {
		t.Errorf("paused, the process's output went from %d to %d bytes", before, after)
	}
	_, err = h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "true"}})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "SANDBOX_PAUSED" {
		t.Errorf("Exec while paused: %v; want FAILED_PRECONDITION SANDBOX_PAUSED", err)
	}
	_, err = h.client.StartProcess(ctx, &sandboxv1.StartProcessRequest{SandboxId: id, Spec: &sandboxv1.ProcessSpec{Command: "true"}})
	if status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "SANDBOX_PAUSED" {
		t.Errorf("StartProcess while paused: %v; want FAILED_PRECONDITION SANDBOX_PAUSED", err)
	}
	if _, err := h.client.WriteFile(ctx, &sandboxv1.WriteFileRequest{SandboxId: id, Path: "f", Content: []byte("x")}); err != nil {
		t.Errorf("WriteFile while paused: %v", err)
	}
	// Resume over REST.
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.http+"/v1/sandboxes/"+id+":resume", strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	if hr.StatusCode != http.StatusOK || strings.Contains(string(body), "PAUSED") {
		t.Errorf("POST :resume = %d %s", hr.StatusCode, body)
	}
	deadline := time.Now().Add(30 * time.Second)
	for size() == before {
		if time.Now().After(deadline) {
			t.Fatal("resumed, the process made no progress")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out, err := execOut(t, h.client, id, "cat f"); err != nil || out != "x" {
		t.Errorf("Exec after resume: %q, %v", out, err)
	}
	// Paused again, the sandbox is still deleted cleanly.
	if _, err := h.client.PauseSandbox(ctx, &sandboxv1.PauseSandboxRequest{SandboxId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: id}); err != nil {
		t.Errorf("DeleteSandbox of a paused sandbox: %v", err)
	}

	hl := start(t)
	lid := hl.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId()
	for name, call := range map[string]func() error{
		"PauseSandbox": func() error {
			_, err := hl.client.PauseSandbox(ctx, &sandboxv1.PauseSandboxRequest{SandboxId: lid})
			return err
		},
		"ResumeSandbox": func() error {
			_, err := hl.client.ResumeSandbox(ctx, &sandboxv1.ResumeSandboxRequest{SandboxId: lid})
			return err
		},
	} {
		if err := call(); status.Code(err) != codes.FailedPrecondition || reasonOf(err) != "CAPABILITY_UNSUPPORTED" || !strings.Contains(status.Convert(err).Message(), "local") {
			t.Errorf("%s on local: %v; want FAILED_PRECONDITION CAPABILITY_UNSUPPORTED naming the driver", name, err)
		}
	}
	if _, err := hl.client.PauseSandbox(ctx, &sandboxv1.PauseSandboxRequest{SandboxId: "sbx-nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("PauseSandbox of an unknown sandbox: %v; want NOT_FOUND", err)
	}
}
