package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestVersionFromLdflags builds fabro with the release's -ldflags and
// checks both ways of asking.
func TestVersionFromLdflags(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fabro")
	ld := "-X main.version=v1.4.2 -X main.commit=0123456789abcdef0123456789abcdef01234567 -X main.date=2026-11-30T10:00:00Z"
	if out, err := exec.Command("go", "build", "-race", "-ldflags", ld, "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	want := "fabro v1.4.2\ncommit:  0123456789abcdef0123456789abcdef01234567\nbuilt:   2026-11-30T10:00:00Z\ngo:      " +
		runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("fabro %v: %v", args, err)
		}
		if diff := cmp.Diff(want, string(out)); diff != "" {
			t.Errorf("fabro %v (-want +got):\n%s", args, diff)
		}
	}
}

// TestVersionFromBuildInfo: without -ldflags, the binary says what Go
// stamped into it, as `go version -m` reads it.
func TestVersionFromBuildInfo(t *testing.T) {
	out, err := exec.Command(fabroBin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	m, err := exec.Command("go", "version", "-m", fabroBin).Output()
	if err != nil {
		t.Fatal(err)
	}
	stamped := map[string]string{}
	for _, line := range strings.Split(string(m), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "build" {
			k, v, _ := strings.Cut(f[1], "=")
			stamped[k] = v
		}
	}
	wantCommit := "unknown (built without -ldflags or VCS stamping)"
	if rev := stamped["vcs.revision"]; rev != "" {
		wantCommit = rev
		if stamped["vcs.modified"] == "true" {
			wantCommit += " (modified)"
		}
	}
	if !strings.Contains(string(out), "\ncommit:  "+wantCommit+"\n") {
		t.Errorf("fabro --version:\n%s\nwant the commit %q (go version -m: %v)", out, wantCommit, stamped)
	}
}

func TestDescribeBuild(t *testing.T) {
	info := &debug.BuildInfo{Main: debug.Module{Version: "v0.9.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "feedface"}, {Key: "vcs.time", Value: "2026-10-01T00:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	tests := []struct {
		name                  string
		version, commit, date string
		info                  *debug.BuildInfo
		want                  buildInfo
	}{
		{"ldflags win", "v1", "abc", "2026-01-01", info, buildInfo{version: "v1", commit: "abc", date: "2026-01-01", dateKind: "built"}},
		{"build info", "", "", "", info, buildInfo{version: "v0.9.0", commit: "feedface (modified)", date: "2026-10-01T00:00:00Z", dateKind: "committed"}},
		{"devel, no vcs", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			buildInfo{version: "dev", commit: "unknown (built without -ldflags or VCS stamping)", date: "unknown", dateKind: "built"}},
		{"no build info", "", "", "", nil, buildInfo{version: "dev", commit: "unknown (built without -ldflags or VCS stamping)", date: "unknown", dateKind: "built"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := describeBuild(tt.version, tt.commit, tt.date, tt.info, tt.info != nil)
			tt.want.goVersion = runtime.Version()
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(buildInfo{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
