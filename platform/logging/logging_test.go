package logging

import (
	"bytes"
	"encoding/json"
	"flag"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	tests := []struct {
		name, format, level string
		wantErr             bool
		wantDebug           bool
		wantJSON            bool
	}{
		{name: "text info", format: "text", level: "info"},
		{name: "json debug", format: "json", level: "DEBUG", wantDebug: true, wantJSON: true},
		{name: "bad format", format: "xml", level: "info", wantErr: true},
		{name: "bad level", format: "text", level: "loud", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logger, err := New(&buf, tt.format, tt.level)
			if (err != nil) != tt.wantErr {
				t.Fatalf("New() error = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			logger.Debug("dbg")
			logger.Info("hello", "k", "v")
			out := buf.String()
			if got := strings.Contains(out, "dbg"); got != tt.wantDebug {
				t.Errorf("debug line present = %v, want %v; output:\n%s", got, tt.wantDebug, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if got := json.Valid([]byte(last)); got != tt.wantJSON {
				t.Errorf("line %q is JSON = %v, want %v", last, got, tt.wantJSON)
			}
		})
	}
}

func TestConfigFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-log-format=json", "-log-level=warn"}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logger, err := c.New(&buf)
	if err != nil {
		t.Fatal(err)
	}
	logger.Info("quiet")
	logger.Warn("loud")
	if out := buf.String(); strings.Contains(out, "quiet") || !strings.Contains(out, `"msg":"loud"`) {
		t.Errorf("unexpected output %q", out)
	}
}
