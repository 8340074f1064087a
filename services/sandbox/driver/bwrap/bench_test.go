package bwrap_test

import (
	"context"
	"log/slog"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap"
)

// BenchmarkExecTrue compares `true` run in bwrap through the plugin (host
// driver, gRPC, the plugin, bwrap, the init, bash) with `bwrap … true` run
// directly with the same namespaces and mounts, side by side.
func BenchmarkExecTrue(b *testing.B) {
	if binary == "" {
		b.Skip("bwrap is not installed")
	}
	ctx := context.Background()
	sum, _ := plugin.FileSHA256(binary)
	pd := plugin.New(plugin.Config{Name: "bwrap", Path: binary, SHA256: sum, Logger: slog.New(slog.DiscardHandler)})
	defer pd.Close()
	sb, err := pd.Create(ctx, driver.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Delete(ctx)
	ws := sb.Info().RootDirectory
	direct := bwrap.New(bwrap.Config{Init: binary})
	path, err := exec.LookPath("bwrap")
	if err != nil {
		b.Fatal(err)
	}
	var inPlugin []time.Duration // the command's own duration, as the plugin measured it
	viaRPC := func() {
		res, err := sb.Exec(ctx, driver.ExecSpec{Command: "true", Timeout: 10 * time.Second, RetainLimit: 1 << 10}, nil)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("exec true: %v %+v", err, res)
		}
		inPlugin = append(inPlugin, res.Duration)
	}
	runDirect := func() {
		if out, err := exec.Command(path, direct.Args(ws, ws, false, "/usr/bin/true")...).CombinedOutput(); err != nil {
			b.Fatalf("bwrap true: %v %s", err, out)
		}
	}
	var rpc, dir []time.Duration
	viaRPC()
	runDirect()
	for b.Loop() {
		t := time.Now()
		viaRPC()
		rpc = append(rpc, time.Since(t))
		t = time.Now()
		runDirect()
		dir = append(dir, time.Since(t))
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	r, d := p50(rpc), p50(dir)
	b.ReportMetric(p50(inPlugin), "in-plugin-p50-ms")
	b.ReportMetric(r, "rpc-p50-ms")
	b.ReportMetric(d, "direct-p50-ms")
	b.ReportMetric(r-d, "delta-ms")
	b.ReportMetric(r/d, "ratio")
	b.ReportMetric(0, "ns/op")
}
