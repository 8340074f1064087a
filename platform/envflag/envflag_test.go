package envflag

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type values struct {
	DataDir string
	Port    int
	Drain   time.Duration
	Verbose bool
}

func newFlagSet(v *values) *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&v.DataDir, "data-dir", "/default", "")
	fs.IntVar(&v.Port, "port", 7700, "")
	fs.DurationVar(&v.Drain, "drain-timeout", 10*time.Second, "")
	fs.BoolVar(&v.Verbose, "verbose", false, "")
	return fs
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    values
		wantErr string // substring; "" means no error
	}{
		{
			name: "defaults",
			want: values{DataDir: "/default", Port: 7700, Drain: 10 * time.Second},
		},
		{
			name: "env over default",
			env:  map[string]string{"FABRO_DATA_DIR": "/env", "FABRO_PORT": "9", "FABRO_DRAIN_TIMEOUT": "3s", "FABRO_VERBOSE": "true"},
			want: values{DataDir: "/env", Port: 9, Drain: 3 * time.Second, Verbose: true},
		},
		{
			name: "flag over env",
			args: []string{"-data-dir=/flag", "-port", "1"},
			env:  map[string]string{"FABRO_DATA_DIR": "/env", "FABRO_PORT": "9"},
			want: values{DataDir: "/flag", Port: 1, Drain: 10 * time.Second},
		},
		{
			name: "empty env value is present",
			env:  map[string]string{"FABRO_DATA_DIR": ""},
			want: values{DataDir: "", Port: 7700, Drain: 10 * time.Second},
		},
		{
			name: "other prefix ignored",
			env:  map[string]string{"OTHER_PORT": "9", "PORT": "8"},
			want: values{DataDir: "/default", Port: 7700, Drain: 10 * time.Second},
		},
		{
			name:    "bad env value",
			env:     map[string]string{"FABRO_PORT": "seven"},
			wantErr: "FABRO_PORT",
		},
		{
			name:    "bad env value ignored when flag set",
			args:    []string{"-port=5"},
			env:     map[string]string{"FABRO_PORT": "seven"},
			want:    values{DataDir: "/default", Port: 5, Drain: 10 * time.Second},
			wantErr: "",
		},
		{
			name:    "bad flag",
			args:    []string{"-nope"},
			wantErr: "nope",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got values
			fs := newFlagSet(&got)
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			err := Parse(fs, tt.args, "FABRO", lookup)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("values mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEnvNames(t *testing.T) {
	fs := newFlagSet(new(values))
	want := []string{"FABRO_DATA_DIR", "FABRO_DRAIN_TIMEOUT", "FABRO_PORT", "FABRO_VERBOSE"}
	if diff := cmp.Diff(want, EnvNames(fs, "FABRO")); diff != "" {
		t.Errorf("EnvNames mismatch (-want +got):\n%s", diff)
	}
	if got := EnvName("", "max-msg-bytes"); got != "MAX_MSG_BYTES" {
		t.Errorf("EnvName(\"\", max-msg-bytes) = %q", got)
	}
}
