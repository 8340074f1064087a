package server

import (
	"context"
	"flag"
	"log/slog"
	"strings"
	"testing"
)

func TestRunMain(t *testing.T) {
	t.Setenv("FABRO_MAIN_TEST_NAME", "from-env")
	var name string
	dataDir := t.TempDir()
	// The Makefile exports FABRO_DATA_DIR for make run; this test's own wins.
	t.Setenv("FABRO_DATA_DIR", dataDir)
	register := func(fs *flag.FlagSet) {
		fs.StringVar(&name, "main-test-name", "default", "")
		fs.String("data-dir", dataDir, "")
	}
	var cleaned bool
	build := func(ctx context.Context, _ *slog.Logger, srv Config) ([]Service, func(), error) {
		if want := DefaultTokensFile(dataDir); srv.TokensFile != want {
			t.Errorf("token store = %q, want %q beside -data-dir", srv.TokensFile, want)
		}
		return []Service{newFakeVault(t)}, func() { cleaned = true }, nil
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // serve, then drain at once
	if err := runMain(ctx, "test", []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", ""}, Config{GRPCAddr: "127.0.0.1:1"}, register, build); err != nil {
		t.Fatalf("runMain: %v", err)
	}
	if name != "from-env" || !cleaned {
		t.Errorf("flag from env = %q, cleanup ran = %v; want from-env and true", name, cleaned)
	}

	err := runMain(t.Context(), "test", []string{"-no-such-flag"}, Config{GRPCAddr: "127.0.0.1:0"}, register, build)
	if err == nil || !strings.Contains(err.Error(), "no-such-flag") {
		t.Errorf("bad flag: err = %v", err)
	}
}
