package plugin

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// stderr is the process's stderr before go-plugin redirects os.Stderr to
// the host's stdio stream: log lines written here reach the host's log.
var stderr = os.Stderr

// Logger returns the logger a plugin should log with: JSON lines on stderr
// in the form go-plugin parses, which the host re-logs in its own
// structured log at the same level, tagged with the plugin's name.
func Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				return slog.String("@timestamp", a.Value.Time().Format("2006-01-02T15:04:05.000000Z07:00"))
			case slog.LevelKey:
				lvl, _ := a.Value.Any().(slog.Level)
				return slog.String("@level", hclogLevelName(lvl))
			case slog.MessageKey:
				return slog.String("@message", a.Value.String())
			}
			return a
		},
	}))
}

func hclogLevelName(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "debug"
	case l < slog.LevelWarn:
		return "info"
	case l < slog.LevelError:
		return "warn"
	}
	return "error"
}

// slogHCLog is an hclog.Logger that writes to a *slog.Logger: go-plugin
// logs its own events, and re-logs the plugin's lines, through it.
type slogHCLog struct {
	l    *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*slogHCLog)(nil)

func newHCLog(l *slog.Logger) hclog.Logger { return &slogHCLog{l: l} }

func (h *slogHCLog) Log(level hclog.Level, msg string, args ...any) {
	var lvl slog.Level
	switch level {
	case hclog.Trace, hclog.Debug, hclog.NoLevel:
		lvl = slog.LevelDebug
	case hclog.Info:
		lvl = slog.LevelInfo
	case hclog.Warn:
		lvl = slog.LevelWarn
	default:
		lvl = slog.LevelError
	}
	if !h.l.Enabled(context.Background(), lvl) {
		return
	}
	kv := make([]any, 0, len(h.args)+len(args))
	kv = append(kv, h.args...)
	for i := 0; i+1 < len(args); i += 2 {
		k := fmt.Sprint(args[i])
		switch k {
		case "timestamp": // go-plugin's copy of the line's time; slog has its own
			continue
		case "plugin": // go-plugin's binary path; "plugin" is the configured name
			k = "plugin_path"
		}
		kv = append(kv, k, args[i+1])
	}
	if len(args)%2 == 1 {
		kv = append(kv, "extra", args[len(args)-1])
	}
	h.l.Log(context.Background(), lvl, msg, kv...)
}

func (h *slogHCLog) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *slogHCLog) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *slogHCLog) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *slogHCLog) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *slogHCLog) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }
func (h *slogHCLog) IsTrace() bool                 { return h.enabled(slog.LevelDebug) }
func (h *slogHCLog) IsDebug() bool                 { return h.enabled(slog.LevelDebug) }
func (h *slogHCLog) IsInfo() bool                  { return h.enabled(slog.LevelInfo) }
func (h *slogHCLog) IsWarn() bool                  { return h.enabled(slog.LevelWarn) }
func (h *slogHCLog) IsError() bool                 { return h.enabled(slog.LevelError) }
func (h *slogHCLog) ImpliedArgs() []any            { return h.args }
func (h *slogHCLog) Name() string                  { return h.name }
func (h *slogHCLog) SetLevel(hclog.Level)          {}

func (h *slogHCLog) enabled(l slog.Level) bool { return h.l.Enabled(context.Background(), l) }

func (h *slogHCLog) With(args ...any) hclog.Logger {
	return &slogHCLog{l: h.l, name: h.name, args: append(append([]any(nil), h.args...), args...)}
}

// Named keeps the name out of the attributes: the host tags every line
// with the configured plugin name already.
func (h *slogHCLog) Named(name string) hclog.Logger {
	n := name
	if h.name != "" {
		n = h.name + "." + name
	}
	return &slogHCLog{l: h.l, name: n, args: h.args}
}

func (h *slogHCLog) ResetNamed(name string) hclog.Logger {
	return &slogHCLog{l: h.l, name: name, args: h.args}
}

func (h *slogHCLog) GetLevel() hclog.Level {
	switch {
	case h.IsDebug():
		return hclog.Debug
	case h.IsInfo():
		return hclog.Info
	case h.IsWarn():
		return hclog.Warn
	}
	return hclog.Error
}

func (h *slogHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *slogHCLog) StandardWriter(*hclog.StandardLoggerOptions) io.Writer { return lineWriter{h} }

type lineWriter struct{ h *slogHCLog }

func (w lineWriter) Write(p []byte) (int, error) {
	w.h.Info(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
