// Package logging builds the process-wide *slog.Logger from two settings,
// an output format and a minimum level, so every binary logs alike. Every
// line written with a context carries that context's trace_id and span_id
// and the attributes added by [With] (session_id, rpc_method).
package logging

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
)

// New returns a logger writing to w. format is "text" or "json"; level is
// a slog level name such as "debug", "info", "warn", "error" (case-insensitive,
// offsets like "info+2" allowed).
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(NewContextHandler(slog.NewTextHandler(w, opts))), nil
	case "json":
		return slog.New(NewContextHandler(slog.NewJSONHandler(w, opts))), nil
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
}

// Config holds the logging flags.
type Config struct {
	Format string // "text" or "json"
	Level  string // "debug", "info", "warn" or "error"
}

// RegisterFlags binds -log-format (default "text") and -log-level
// (default "info") to c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Format, "log-format", "text", "log output format: text or json")
	fs.StringVar(&c.Level, "log-level", "info", "minimum log level: debug, info, warn or error")
}

// New returns a logger writing to w configured from c.
func (c Config) New(w io.Writer) (*slog.Logger, error) {
	return New(w, c.Format, c.Level)
}
