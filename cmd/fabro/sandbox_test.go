package main

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
)

// TestSandboxConformance runs `fabro sandbox conformance` against the
// example plugin (built GOWORK=off, as its author would) and against a
// binary that is not a plugin.
func TestSandboxConformance(t *testing.T) {
	t.Parallel()
	example := plugintest.Build(t, "../../examples/sandbox-plugin")
	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     []string
	}{
		{"the example plugin conforms", []string{example}, 0, []string{"0 failed", "PASS Capabilities", "PASS Exec", "PASS Files", "PASS Search"}},
		{"one part", []string{"-run", "Search", example}, 0, []string{"PASS Search", "0 failed"}},
		{"not a plugin", []string{"/usr/bin/true"}, 1, []string{"FAIL Capabilities", "failed (run with -v", "the plugin is not available"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := exec.CommandContext(t.Context(), fabroBin, append([]string{"sandbox", "conformance"}, tt.args...)...).CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode {
				t.Errorf("exit %d; want %d\n%s", code, tt.wantCode, out)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestServeLoadsPlugins runs `fabro serve -sandbox-plugin-dir` with the
// bwrap plugin and makes a sandbox with it over REST: the driver name
// "bwrap" reaches the plugin.
func TestServeLoadsPlugins(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bwrap is not installed: `make deps` installs Debian's bubblewrap")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fabro-sandbox-bwrap")
	if err := plugintest.BuildTo(t.Context(), "../../services/sandbox/cmd/fabro-sandbox-bwrap", bin); err != nil {
		t.Fatal(err)
	}
	sum, err := plugin.FileSHA256(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "SHA256SUMS"), []byte(sum+"  fabro-sandbox-bwrap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, t.TempDir(), "FABRO_SANDBOX_PLUGIN_DIR="+dir)
	token := s.adminToken(t)
	call := func(method, path, body string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+s.httpAddr+path, strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		return http.DefaultClient.Do(req)
	}
	get := func(path string) string {
		resp, err := call(http.MethodGet, path, "")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if drivers := get("/v1/sandboxDrivers"); !strings.Contains(drivers, `"driverId":"bwrap"`) || !strings.Contains(drivers, "ISOLATION_NAMESPACE") {
		t.Fatalf("ListDrivers = %s; want bwrap with namespace isolation", drivers)
	}
	resp, err := call(http.MethodPost, "/v1/sandboxes", `{"spec":{"driver":"bwrap"}}`)
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		Sandbox struct {
			ID string `json:"sandboxId"`
		} `json:"sandbox"`
	}
	err = json.NewDecoder(resp.Body).Decode(&created)
	resp.Body.Close()
	if err != nil || created.Sandbox.ID == "" {
		t.Fatalf("create a bwrap sandbox: %v", err)
	}
	resp, err = call(http.MethodPost, "/v1/sandboxes/"+created.Sandbox.ID+":exec", `{"spec":{"command":"hostname"}}`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), base64.StdEncoding.EncodeToString([]byte("fabro-sandbox\n"))) {
		t.Errorf("exec hostname in the bwrap sandbox = %s", b)
	}
}
