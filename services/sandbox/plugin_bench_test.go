package sandbox_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// BenchmarkPluginStart measures a plugin's start to its first answer:
// launch, handshake with mutual TLS, Describe and Available. Goal: p50 at
// most 150 ms.
func BenchmarkPluginStart(b *testing.B) {
	bin := testPlugin(b)
	sum, _ := plugin.FileSHA256(bin)
	var took []time.Duration
	for b.Loop() {
		d := plugin.New(plugin.Config{Name: "test", Path: bin, SHA256: sum, Logger: slog.New(slog.DiscardHandler)})
		t := time.Now()
		if err := d.Available(context.Background()); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(t))
		d.Close()
	}
	slices.Sort(took)
	p50 := float64(took[len(took)/2].Microseconds()) / 1000
	b.ReportMetric(p50, "start-p50-ms")
	b.ReportMetric(p50/150, "of-goal")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPluginExecTrue compares `true` run through a plugin (the local
// driver served by the test plugin) with the same driver compiled in, side
// by side. Goal: at most 1 ms added at p50.
func BenchmarkPluginExecTrue(b *testing.B) {
	ctx := context.Background()
	bin := testPlugin(b)
	sum, _ := plugin.FileSHA256(bin)
	pd := plugin.New(plugin.Config{Name: "test", Path: bin, SHA256: sum, Logger: slog.New(slog.DiscardHandler)})
	defer pd.Close()
	viaPlugin, err := pd.Create(ctx, driver.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer viaPlugin.Delete(ctx)
	compiledIn, err := local.New(local.Config{WorkspaceRoot: b.TempDir()}).Create(ctx, driver.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer compiledIn.Delete(ctx)
	spec := driver.ExecSpec{Command: "true", Timeout: 10 * time.Second, RetainLimit: 1 << 10}
	run := func(sb driver.Sandbox) func() {
		return func() {
			if res, err := sb.Exec(ctx, spec, nil); err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
				b.Fatalf("exec true: %v %+v", err, res)
			}
		}
	}
	sideBySide(b, run(viaPlugin), run(compiledIn))
}
