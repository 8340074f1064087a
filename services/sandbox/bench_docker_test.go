package sandbox_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/docker"
)

func startDocker(b *testing.B) (*harness, string) {
	b.Helper()
	root := b.TempDir()
	d := docker.New(docker.Config{WorkspaceRoot: root, Owner: "fabro-bench-" + b.Name()})
	b.Cleanup(func() { d.Close() })
	if err := d.Available(b.Context()); err != nil {
		b.Fatal(err)
	}
	return start(b, d), root
}

// BenchmarkDockerExecTrue compares `true` through the Exec RPC on a docker
// sandbox with `docker exec <container> true` from the CLI. Goal: the RPC
// faster than the CLI (ratio < 1), at most 80 ms at p50.
func BenchmarkDockerExecTrue(b *testing.B) {
	h, _ := startDocker(b)
	id := h.create(b, &sandboxv1.SandboxSpec{Driver: "docker"}).GetSandboxId()
	sideBySide(b, func() {
		resp, err := h.client.Exec(b.Context(), &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "true"}})
		if err != nil || resp.GetResult().GetExitCode() != 0 {
			b.Fatal(resp, err)
		}
	}, func() {
		if out, err := exec.Command("docker", "exec", "-u", "1000:1000", "fabro-"+id, "true").CombinedOutput(); err != nil {
			b.Fatal(err, string(out))
		}
	})
}

// BenchmarkDockerCreate measures CreateSandbox on docker (a container
// created, started and probed) against `docker run -d` of the same image
// from the CLI; deletes are not timed.
func BenchmarkDockerCreate(b *testing.B) {
	h, _ := startDocker(b)
	var rpc, cli []time.Duration
	for b.Loop() {
		t := time.Now()
		sb := h.create(b, &sandboxv1.SandboxSpec{Driver: "docker"})
		rpc = append(rpc, time.Since(t))
		b.StopTimer()
		h.client.DeleteSandbox(b.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: sb.GetSandboxId()})
		b.StartTimer()
		t = time.Now()
		out, err := exec.Command("docker", "run", "-d", "--network", "none", "-u", "1000:1000", docker.DefaultImage, "sleep", "infinity").Output()
		cli = append(cli, time.Since(t))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		exec.Command("docker", "rm", "-f", string(bytes.TrimSpace(out))).Run()
		b.StartTimer()
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	r, c := p50(rpc), p50(cli)
	b.ReportMetric(r, "create-p50-ms")
	b.ReportMetric(c, "docker-run-p50-ms")
	b.ReportMetric(r/c, "ratio")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkDockerGrep compares the Grep RPC on a docker sandbox holding
// 20,000 files with rg run inside its container directly, by an exec
// through the Engine API (no CLI start-up counted), with the local driver's
// flags. Goal: ratio at most 1.3.
func BenchmarkDockerGrep(b *testing.B) {
	h, root := startDocker(b)
	sb := h.create(b, &sandboxv1.SandboxSpec{Driver: "docker"})
	host := filepath.Join(root, "docker-"+sb.GetSandboxId())
	for i := range 20000 {
		dir := filepath.Join(host, fmt.Sprintf("d%02d/e%02d", i%50, i/50%20))
		os.MkdirAll(dir, 0o755)
		body := fmt.Sprintf("package p%d\n\nfunc F%d() int { return %d }\n// filler line to search through\n", i, i, i)
		if i%100 == 0 {
			body += "// NeedleMarker here\n"
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.go", i)), []byte(body), 0o644)
	}
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	args := []string{"rg", "--no-config", "--hidden", "--no-ignore", "--no-messages", "--null",
		"--line-number", "--with-filename", "--no-heading", "--color=never", "--no-unicode",
		"-e", "NeedleMarker", "--", "."}
	sideBySide(b, func() {
		resp, err := h.client.Grep(b.Context(), &sandboxv1.GrepRequest{SandboxId: sb.GetSandboxId(), Pattern: "NeedleMarker"})
		if err != nil || len(resp.GetMatches()) != 200 {
			b.Fatalf("%d matches, %v", len(resp.GetMatches()), err)
		}
	}, func() {
		ctx := b.Context()
		cr, err := cli.ContainerExecCreate(ctx, "fabro-"+sb.GetSandboxId(), container.ExecOptions{
			User: "1000:1000", Cmd: args, WorkingDir: "/workspace", Env: []string{"LC_ALL=C"}, AttachStdout: true, AttachStderr: true})
		if err != nil {
			b.Fatal(err)
		}
		hj, err := cli.ContainerExecAttach(ctx, cr.ID, container.ExecAttachOptions{})
		if err != nil {
			b.Fatal(err)
		}
		var out bytes.Buffer
		out.ReadFrom(hj.Reader)
		hj.Close()
		if out.Len() == 0 {
			b.Fatal("rg printed nothing")
		}
	})
}
