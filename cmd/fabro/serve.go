package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fabro-sh/fabro-go/platform/envflag"
	"github.com/fabro-sh/fabro-go/platform/logging"
	"github.com/fabro-sh/fabro-go/platform/server"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/vault"
)

// Default addresses of `fabro serve`; the per-service binaries use their own.
const (
	defaultGRPCAddr = "127.0.0.1:7700"
	defaultHTTPAddr = "127.0.0.1:7780"
)

// serve runs every service in this process on one gRPC port and one REST
// port, until ctx ends (SIGINT or SIGTERM), then drains.
func serve(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("fabro serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	var (
		srvCfg   server.Config
		logCfg   logging.Config
		vaultCfg vault.Config
		dataDir  string
	)
	srvCfg.RegisterFlags(fs, server.Config{GRPCAddr: defaultGRPCAddr, HTTPAddr: defaultHTTPAddr})
	logCfg.RegisterFlags(fs)
	vaultCfg.RegisterFlags(fs)
	fs.StringVar(&dataDir, "data-dir", defaultDataDir(e.lookupEnv), "directory for the vault store, its audit log and generated keys, and sandbox workspaces")
	if err := envflag.Parse(fs, args, "FABRO", e.lookupEnv); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("serve takes no arguments, got %q", fs.Args())
	}
	logger, err := logCfg.New(e.stderr)
	if err != nil {
		return err
	}
	vaultCfg.DataDir = dataDir
	vaultCfg.LookupEnv = e.lookupEnv
	v, err := vault.New(ctx, vaultCfg, logger)
	if err != nil {
		return err
	}
	defer v.Close()
	sb, err := sandbox.New(sandbox.Config{DataDir: dataDir}, logger)
	if err != nil {
		return err
	}
	// Sandboxes outlive the request that made them; delete them (and kill
	// their commands) once the server has drained.
	defer sb.Close(context.WithoutCancel(ctx))
	return server.Run(ctx, srvCfg, logger, v, sb)
}

// defaultDataDir follows the XDG base directory convention.
func defaultDataDir(lookupEnv func(string) (string, bool)) string {
	if d, ok := lookupEnv("XDG_DATA_HOME"); ok && d != "" {
		return filepath.Join(d, "fabro")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "fabro")
	}
	return fmt.Sprintf("%s/fabro", os.TempDir())
}
