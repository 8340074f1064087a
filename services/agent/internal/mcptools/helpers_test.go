package mcptools

import (
	"log/slog"
	"testing"
	"time"
)

type slogLogger = slog.Logger

func newTestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
}

var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }
