package bwrap_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap"
)

// BenchmarkExecTrue compares `true` run in bwrap through the plugin (host
// driver, gRPC, the plugin, bwrap as the sandbox's uid in a user
// namespace, the init, bash) with `bwrap … true` run directly with the
// same namespaces and mounts as the same uid ("bare"), and with the same
// bwrap run as root without a user namespace, as the driver did before
// ("root"), and with the plugin run as its own init as it was before the
// small init ("rpc-self-init"), side by side.
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
	// The same plugin without the small init beside it: it runs itself
	// as the init, as before.
	selfDir := b.TempDir()
	selfBin := selfDir + "/fabro-sandbox-bwrap"
	if raw, err := os.ReadFile(binary); err != nil || os.WriteFile(selfBin, raw, 0o755) != nil {
		b.Fatal(err)
	}
	pdSelf := plugin.New(plugin.Config{Name: "bwrap", Path: selfBin, SHA256: sum, Logger: slog.New(slog.DiscardHandler)})
	defer pdSelf.Close()
	sbSelf, err := pdSelf.Create(ctx, driver.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer sbSelf.Delete(ctx)
	ws := sb.Info().RootDirectory
	direct := bwrap.New(bwrap.Config{Init: binary})
	if err := direct.Available(ctx); err != nil {
		b.Fatal(err)
	}
	path, err := exec.LookPath("bwrap")
	if err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(ws)
	if err != nil {
		b.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: st.Uid, Gid: st.Gid, Groups: []uint32{}}
	}
	userns := direct.Args(ws, ws, false, "/usr/bin/true")
	rootArgs := slices.DeleteFunc(slices.Clone(userns), func(a string) bool { return a == "--unshare-user" || a == "--disable-userns" })
	// Root without capabilities cannot enter the sandbox uid's 0700
	// workspace: it starts in / instead.
	if i := slices.Index(rootArgs, "--chdir"); i >= 0 {
		rootArgs[i+1] = "/"
	}
	var inPlugin []time.Duration // the command's own duration, as the plugin measured it
	viaRPC := func() {
		res, err := sb.Exec(ctx, driver.ExecSpec{Command: "true", Timeout: 10 * time.Second, RetainLimit: 1 << 10}, nil)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("exec true: %v %+v", err, res)
		}
		inPlugin = append(inPlugin, res.Duration)
	}
	runBwrap := func(args []string, cred *syscall.Credential) func() {
		return func() {
			cmd := exec.Command(path, args...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("bwrap true: %v %s", err, out)
			}
		}
	}
	bare, root := runBwrap(userns, cred), runBwrap(rootArgs, nil)
	viaSelf := func() {
		res, err := sbSelf.Exec(ctx, driver.ExecSpec{Command: "true", Timeout: 10 * time.Second, RetainLimit: 1 << 10}, nil)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("exec true (self init): %v %+v", err, res)
		}
	}
	timed := func(f func(), into *[]time.Duration) {
		t := time.Now()
		f()
		*into = append(*into, time.Since(t))
	}
	var rpc, self, dir, asRoot []time.Duration
	viaRPC()
	viaSelf()
	bare()
	root()
	for b.Loop() {
		timed(viaRPC, &rpc)
		timed(viaSelf, &self)
		timed(bare, &dir)
		timed(root, &asRoot)
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	r, d, ro := p50(rpc), p50(dir), p50(asRoot)
	b.ReportMetric(p50(inPlugin), "in-plugin-p50-ms")
	b.ReportMetric(r, "rpc-p50-ms")
	b.ReportMetric(d, "bare-p50-ms")
	b.ReportMetric(ro, "root-bwrap-p50-ms")
	b.ReportMetric(r/d, "rpc/bare")
	b.ReportMetric(p50(self)/d, "rpc-self-init/bare")
	b.ReportMetric(d/ro, "bare/root")
	b.ReportMetric(0, "ns/op")
}
