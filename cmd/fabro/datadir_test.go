package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestServeConflicts: a second fabro serve beside a running one says what
// is in its way and how to get round it, in one line, and exits 1: on the
// same data directory, the pid holding it and --data-dir (before any port
// is tried, so the default ports do not mask it); on a port in use, the
// address, its role, the holder and the flag.
func TestServeConflicts(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, filepath.Join(dir, "data"))
	pid := strconv.Itoa(s.cmd.Process.Pid)
	_, port, _ := strings.Cut(s.grpcAddr, ":")

	tests := []struct {
		name string
		args []string
	}{
		// The first server's own ports: the data directory is named first.
		{"serve-data-dir-in-use", []string{"serve", "-data-dir", s.dataDir, "-grpc-addr", s.grpcAddr, "-http-addr", s.httpAddr}},
		{"serve-port-in-use", []string{"serve", "-data-dir", filepath.Join(dir, "other"), "-grpc-addr", s.grpcAddr, "-http-addr", "127.0.0.1:0", "-nats-listen", "none"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, code := fabro(t, "", tt.args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr:\n%s", code, errOut)
			}
			// The last line is the error; what comes before is logs.
			lines := strings.Split(strings.TrimSpace(errOut), "\n")
			last := lines[len(lines)-1] + "\n"
			if !strings.Contains(last, "(pid "+pid+")") {
				t.Errorf("%q does not name the pid %s of the first server", last, pid)
			}
			last = strings.ReplaceAll(last, dir, "$TMP")
			last = strings.ReplaceAll(last, "pid "+pid, "pid $PID")
			last = regexp.MustCompile(`127\.0\.0\.1:`+port+`\b`).ReplaceAllString(last, "127.0.0.1:$$PORT")
			last = regexp.MustCompile(`by [a-z.]+ \(pid`).ReplaceAllString(last, "by fabro (pid")
			checkGolden(t, tt.name+".txt", last)
		})
	}
}
