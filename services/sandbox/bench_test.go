package sandbox_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// sideBySide runs viaRPC and direct alternately, b.N times each, so that
// page cache, CPU frequency and other load fall on both alike, and reports
// each one's p50, their difference and their ratio.
func sideBySide(b *testing.B, viaRPC, direct func()) {
	var rpc, dir []time.Duration
	viaRPC() // warm up both: connections, page cache, the rg probe
	direct()
	for b.Loop() {
		t := time.Now()
		viaRPC()
		rpc = append(rpc, time.Since(t))
		t = time.Now()
		direct()
		dir = append(dir, time.Since(t))
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	r, d := p50(rpc), p50(dir)
	b.ReportMetric(r, "rpc-p50-ms")
	b.ReportMetric(d, "direct-p50-ms")
	b.ReportMetric(r-d, "delta-ms")
	b.ReportMetric(r/d, "ratio")
	b.ReportMetric(0, "ns/op") // the pair's total time means little
}

// BenchmarkExecTrue compares `true` through the Exec RPC with `bash -c
// true` run directly. Goal: p50 within 2 ms (delta-ms).
func BenchmarkExecTrue(b *testing.B) {
	h := start(b)
	id := h.create(b, &sandboxv1.SandboxSpec{}).GetSandboxId()
	bash, err := exec.LookPath("bash")
	if err != nil {
		b.Fatal(err)
	}
	sideBySide(b, func() {
		if _, err := h.client.Exec(b.Context(), &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "true"}}); err != nil {
			b.Fatal(err)
		}
	}, func() {
		if err := exec.Command(bash, "-c", "true").Run(); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkGrep compares the Grep RPC with raw rg on a generated tree of
// 20,000 files. Raw rg gets exactly the flags the local driver gives it
// (and the same small environment), so the ratio measures what the RPC
// adds: the gRPC round trip, parsing, sorting and marshalling. Goal: ratio
// at most 1.3.
func BenchmarkGrep(b *testing.B) {
	rg, err := exec.LookPath("rg")
	if err != nil {
		b.Skip("rg is not installed")
	}
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
	// The local driver's command line (driver/local/search.go).
	args := []string{"--no-config", "--hidden", "--no-ignore", "--no-messages", "--null",
		"--line-number", "--with-filename", "--no-heading", "--color=never", "--no-unicode",
		"-e", "NeedleMarker", "--", "."}
	env := []string{"LC_ALL=C", "PATH=" + os.Getenv("PATH")}
	sideBySide(b, func() {
		resp, err := h.client.Grep(b.Context(), &sandboxv1.GrepRequest{SandboxId: sb.GetSandboxId(), Pattern: "NeedleMarker"})
		if err != nil || len(resp.GetMatches()) != 200 || resp.GetBackend() != sandboxv1.GrepBackend_GREP_BACKEND_RIPGREP {
			b.Fatalf("%d matches by %v, %v", len(resp.GetMatches()), resp.GetBackend(), err)
		}
	}, func() {
		cmd := exec.Command(rg, args...)
		cmd.Dir, cmd.Env = root, env
		out, err := cmd.Output()
		if err != nil || len(out) == 0 {
			b.Fatal(err)
		}
	})
}

// BenchmarkRead10MB compares ReadFileBytes through the RPC with
// os.ReadFile of the same 10 MB file.
func BenchmarkRead10MB(b *testing.B) {
	h := start(b)
	sb := h.create(b, &sandboxv1.SandboxSpec{})
	path := filepath.Join(sb.GetRootDirectory(), "big.bin")
	os.WriteFile(path, make([]byte, 10<<20), 0o644)
	sideBySide(b, func() {
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
	}, func() {
		if _, err := os.ReadFile(path); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkExecConcurrent compares Exec throughput on the local driver
// (`true` through the RPC, spread over 10 sandboxes) with `bash -c true`
// spawned directly, at concurrency 1, 10 and 100. Rounds of each
// alternate, so other load falls on both alike. Goal: ratio (RPC Execs/s
// over direct spawns/s) at least 0.7 at every concurrency.
func BenchmarkExecConcurrent(b *testing.B) {
	h := start(b)
	var ids []string
	for range 10 {
		ids = append(ids, h.create(b, &sandboxv1.SandboxSpec{}).GetSandboxId())
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			round := func(call func(i int)) time.Duration {
				const perWorker = 4
				t := time.Now()
				var wg sync.WaitGroup
				for w := range c {
					wg.Go(func() {
						for k := range perWorker {
							call(w*perWorker + k)
						}
					})
				}
				wg.Wait()
				return time.Since(t)
			}
			viaRPC := func(i int) {
				resp, err := h.client.Exec(b.Context(), &sandboxv1.ExecRequest{SandboxId: ids[i%len(ids)], Spec: &sandboxv1.ExecSpec{Command: "true"}})
				if err != nil || resp.GetResult().GetExitCode() != 0 {
					b.Errorf("Exec: %v %v", resp, err)
				}
			}
			direct := func(int) {
				if err := exec.Command(bash, "-c", "true").Run(); err != nil {
					b.Error(err)
				}
			}
			round(viaRPC) // warm up
			var rpc, dir time.Duration
			n := 0
			for b.Loop() {
				rpc += round(viaRPC)
				dir += round(direct)
				n += c * 4
			}
			r, d := float64(n)/rpc.Seconds(), float64(n)/dir.Seconds()
			b.ReportMetric(r, "rpc-execs/s")
			b.ReportMetric(d, "direct-execs/s")
			b.ReportMetric(r/d, "ratio")
			b.ReportMetric(0, "ns/op")
		})
	}
}
