package sandbox_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// p50 runs fn b.N times and reports the median as p50-ms.
func p50(b *testing.B, fn func()) {
	d := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t := time.Now()
		fn()
		d = append(d, time.Since(t))
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkExecTrue compares `true` through the RPC with `bash -c true`.
func BenchmarkExecTrue(b *testing.B) {
	h := start(b)
	id := h.create(b, &sandboxv1.SandboxSpec{}).GetSandboxId()
	b.Run("rpc", func(b *testing.B) {
		p50(b, func() {
			if _, err := h.client.Exec(b.Context(), &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "true"}}); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("direct", func(b *testing.B) {
		p50(b, func() {
			if err := exec.Command("bash", "-c", "true").Run(); err != nil {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkGrep compares grep through the RPC with raw rg on 20,000 files.
func BenchmarkGrep(b *testing.B) {
	h := start(b)
	sb := h.create(b, &sandboxv1.SandboxSpec{})
	root := sb.GetRootDirectory()
	for i := range 20000 {
		dir := filepath.Join(root, fmt.Sprintf("d%02d/e%02d", i%50, i/50%20))
		os.MkdirAll(dir, 0o755)
		body := fmt.Sprintf("package p%d\n\nfunc F%d() int { return %d }\n// filler line to search through\n", i, i, i)
		if i%100 == 0 {
			body += "// NeedleMarker here\n"
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.go", i)), []byte(body), 0o644)
	}
	b.Run("rpc", func(b *testing.B) {
		p50(b, func() {
			resp, err := h.client.Grep(b.Context(), &sandboxv1.GrepRequest{SandboxId: sb.GetSandboxId(), Pattern: "NeedleMarker"})
			if err != nil || len(resp.GetMatches()) != 200 {
				b.Fatalf("%d matches, %v", len(resp.GetMatches()), err)
			}
		})
	})
	b.Run("rg", func(b *testing.B) {
		p50(b, func() {
			cmd := exec.Command("rg", "--no-config", "--hidden", "--no-ignore", "-n", "--null", "-e", "NeedleMarker", "--", ".")
			cmd.Dir = root
			if out, err := cmd.Output(); err != nil || len(out) == 0 {
				b.Fatal(err)
			}
		})
	})
}

// BenchmarkRead10MB compares ReadFileBytes through the RPC with os.ReadFile.
func BenchmarkRead10MB(b *testing.B) {
	h := start(b)
	sb := h.create(b, &sandboxv1.SandboxSpec{})
	path := filepath.Join(sb.GetRootDirectory(), "big.bin")
	os.WriteFile(path, make([]byte, 10<<20), 0o644)
	b.Run("rpc", func(b *testing.B) {
		b.SetBytes(10 << 20)
		p50(b, func() {
			stream, err := h.client.ReadFileBytes(b.Context(), &sandboxv1.ReadFileBytesRequest{SandboxId: sb.GetSandboxId(), Path: "big.bin"})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for {
				m, err := stream.Recv()
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				n += len(m.GetData())
			}
			if n != 10<<20 {
				b.Fatalf("read %d", n)
			}
		})
	})
	b.Run("os.ReadFile", func(b *testing.B) {
		b.SetBytes(10 << 20)
		p50(b, func() {
			if _, err := os.ReadFile(path); err != nil {
				b.Fatal(err)
			}
		})
	})
}
