// Package compose_test runs the product as its containers (compose.yaml).
package compose_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestComposeStack runs the product as its containers: it builds the
// images offline (make images; cached layers and Go builds make a second
// run quick), brings compose.yaml up under a project name of its own on
// free host ports with the offline profile, sets a provider key and runs
// `fabro exec` against the one front door from a project directory, checks
// that the agent's edit landed in that directory on this host, that every
// container reports healthy, and brings the stack down.
func TestComposeStack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds images and runs the stack's containers: make test runs it, -short does not")
	}
	root := repoRoot(t)
	compose := composeCommand(t)
	// A tag of this run's own: never the dev images a running `make up`
	// uses, nor those of another run on the same engine.
	tag := os.Getenv("FABRO_E2E_IMAGE_TAG")
	if tag == "" {
		tag = "e2e-" + randomHex(t)
		t.Cleanup(func() {
			ids, _ := exec.Command("docker", "image", "ls", "-q", "--filter", "reference=fabro/*:"+tag).Output()
			if f := strings.Fields(string(ids)); len(f) > 0 {
				_ = exec.Command("docker", append([]string{"image", "rm", "-f"}, f...)...).Run()
			}
		})
	}
	start := time.Now()
	// The images build from the workspace (go.work), as `make images` does
	// for a person, whatever GOWORK this test runs with.
	runCmd(t, root, append(os.Environ(), "GOWORK="), "make", "--no-print-directory", "images", "FABRO_IMAGE_TAG="+tag)
	built := time.Since(start)

	bin := t.TempDir()
	fabro := filepath.Join(bin, "fabro")
	cmd := exec.Command("go", "build", "-o", fabro, ".")
	cmd.Dir, cmd.Env = filepath.Join(root, "cmd", "fabro"), append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fabro: %v\n%s", err, out)
	}

	// The user's project, owned by a user who is not root (as a checkout
	// is): the sandbox runs the agent's commands as that owner.
	project := filepath.Join(t.TempDir(), "my project")
	if err := os.Mkdir(project, 0o755); err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(project, "hello.txt")
	if err := os.WriteFile(hello, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const owner = 1000
	if os.Geteuid() == 0 {
		for _, p := range []string{project, hello} {
			if err := os.Chown(p, owner, owner); err != nil {
				t.Fatal(err)
			}
		}
	}

	name := "compose-e2e-" + randomHex(t)
	grpcPort, httpPort := freePort(t), freePort(t)
	env := append(os.Environ(),
		"COMPOSE_PROJECT_NAME="+name, "FABRO_IMAGE_TAG="+tag,
		"FABRO_GRPC_PORT="+strconv.Itoa(grpcPort), "FABRO_HTTP_PORT="+strconv.Itoa(httpPort),
		"PWD="+project, "COMPOSE_PROFILES=offline",
		"FABRO_LLM_CATALOG_OVERLAY=/etc/fabro/offline-overlay.json",
		"FABRO_FAKE_SCRIPT="+filepath.Join(root, "deploy", "demo-script.json"))
	composeArgs := func(args ...string) []string {
		return append(append(compose[1:len(compose):len(compose)], "-f", filepath.Join(root, "compose.yaml"), "-p", name), args...)
	}
	t.Cleanup(func() {
		cmd := exec.Command(compose[0], composeArgs("down", "-v", "--remove-orphans", "-t", "5")...)
		cmd.Dir, cmd.Env = root, env
		_ = cmd.Run() // the test's own down below failed or never ran
	})
	upStart := time.Now()
	runCmd(t, root, env, compose[0], composeArgs("up", "-d")...)

	front := fmt.Sprintf("127.0.0.1:%d", grpcPort)
	awaitServing(t, front)
	up := time.Since(upStart)

	vaultID := strings.TrimSpace(runCmd(t, root, env, compose[0], composeArgs("ps", "-q", "vault")...))
	token := filepath.Join(bin, "admin.token")
	runCmd(t, root, nil, "docker", "cp", vaultID+":/issue/admin/token", token)

	// The fabro commands read no configuration of this machine's user.
	fabroEnv := append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "HOME="+t.TempDir())

	// Two subcommands, one address: the vault's and the agent's calls both
	// go through the front door.
	secret := exec.Command(fabro, "secret", "set", "-server", front, "-token-file", token, "--no-probe", "ANTHROPIC_API_KEY")
	secret.Stdin, secret.Env = strings.NewReader("offline-e2e\n"), fabroEnv
	if out, err := secret.CombinedOutput(); err != nil {
		t.Fatalf("fabro secret set: %v\n%s", err, out)
	}
	// REST through the same front door, by path, with the same token.
	tok, err := os.ReadFile(token)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/v1/secrets", httpPort), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"ANTHROPIC_API_KEY"`) {
		t.Errorf("GET /v1/secrets through the front door: %d %s", resp.StatusCode, body)
	}

	execStart := time.Now()
	ex := exec.Command(fabro, "exec", "-server", front, "-token-file", token,
		"--model", "anthropic/claude-sonnet-4.5", "--permissions", "full", "Make the greeting in hello.txt friendlier.")
	ex.Dir, ex.Env = project, fabroEnv
	out, err := ex.CombinedOutput()
	if err != nil {
		t.Fatalf("fabro exec: %v\n%s\n%s", err, out, logs(root, env, compose, composeArgs))
	}
	execTime := time.Since(execStart)
	got, err := os.ReadFile(hello)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello, fabro\n" {
		t.Errorf("hello.txt after fabro exec = %q, want %q; exec said:\n%s", got, "hello, fabro\n", out)
	}
	if fi, err := os.Stat(hello); err != nil {
		t.Error(err)
	} else if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && st.Uid != owner {
		t.Errorf("hello.txt is owned by uid %d after the edit, want the project owner's %d", st.Uid, owner)
	}

	// Every container reports healthy (its own -healthcheck).
	ids := strings.Fields(runCmd(t, root, env, compose[0], composeArgs("ps", "-q")...))
	if len(ids) != 7 {
		t.Errorf("%d containers, want 7 (vault, llmgateway, sandbox, agent, router, otlpsink, fakeprovider)", len(ids))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for _, id := range ids {
		for {
			st := strings.TrimSpace(runCmd(t, root, nil, "docker", "inspect", "-f", "{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}", id))
			if strings.HasSuffix(st, " healthy") {
				break
			}
			if time.Now().After(deadline) || strings.HasSuffix(st, " none") || strings.HasSuffix(st, " unhealthy") {
				t.Errorf("container %s", st)
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	downStart := time.Now()
	runCmd(t, root, env, compose[0], composeArgs("down", "-v", "--remove-orphans", "-t", "5")...)
	if left := strings.TrimSpace(runCmd(t, root, nil, "docker", "ps", "-aq", "--filter", "label=com.docker.compose.project="+name)); left != "" {
		t.Errorf("containers left after down: %s", left)
	}
	t.Logf("images %v, up until the front door served %v, fabro exec %v, down %v, total %v",
		built.Round(time.Millisecond), up.Round(time.Millisecond), execTime.Round(time.Millisecond),
		time.Since(downStart).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "compose.yaml")); err != nil {
		t.Fatalf("no compose.yaml at the repository root %s: %v", dir, err)
	}
	return dir
}

// composeCommand is docker compose (v2) or docker-compose (v1), whichever
// is installed: the same choice as the Makefile's.
func composeCommand(t *testing.T) []string {
	t.Helper()
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	t.Fatal("neither docker compose nor docker-compose is installed")
	return nil
}

func runCmd(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func logs(root string, env, compose []string, composeArgs func(...string) []string) string {
	cmd := exec.Command(compose[0], composeArgs("logs", "--no-color", "--tail", "30")...)
	cmd.Dir, cmd.Env = root, env
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// awaitServing waits for the front door's health, which is SERVING once
// every service behind it is.
func awaitServing(t *testing.T, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the front door %s never served: %v %v", addr, resp.GetStatus(), err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomHex(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
