// Package escape runs hostile commands against `fabro serve`, a separate
// process running as root, over real gRPC: on the local driver (with
// -sandbox-uids), the bwrap plugin and docker, each case plants the
// evidence it must not reach and fails if the plant itself fails.
package escape

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

var fabroBin, pluginDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fabro-escape-")
	if err != nil {
		panic(err)
	}
	fabroBin, pluginDir = filepath.Join(dir, "fabro"), filepath.Join(dir, "plugins")
	os.Mkdir(pluginDir, 0o755)
	for _, b := range []struct{ src, out string }{
		{"../../cmd/fabro", fabroBin},
		{"../../services/sandbox/cmd/fabro-sandbox-bwrap", filepath.Join(pluginDir, "fabro-sandbox-bwrap")},
		{"../../services/sandbox/cmd/fabro-bwrap-init", filepath.Join(pluginDir, "fabro-bwrap-init")},
	} {
		build := exec.Command("go", "build", "-o", b.out, ".")
		build.Dir, build.Env = b.src, append(os.Environ(), "GOWORK=off")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b.src, err, out)
			os.Exit(1)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(pluginDir, "fabro-sandbox-bwrap"))
	sum := sha256.Sum256(raw)
	os.WriteFile(filepath.Join(pluginDir, "SHA256SUMS"), []byte(hex.EncodeToString(sum[:])+"  fabro-sandbox-bwrap\n"), 0o644)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type serve struct {
	pid      int // fabro serve's
	grpcAddr string
	data     string
	client   sandboxv1.SandboxServiceClient
	token    string
	stop     func() // ends fabro serve (again: nothing)
}

func startServe(t *testing.T) *serve {
	t.Helper()
	return startServeData(t, t.TempDir())
}

// startServeData starts fabro serve on the data directory data; it is
// stopped at the end of the test, or earlier by stop.
func startServeData(t *testing.T, data string) *serve {
	t.Helper()
	cmd := exec.Command(fabroBin, "serve", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-nats-listen", "127.0.0.1:-1",
		"-log-format", "json", "-sandbox-uids", "1610000000-1610000999", "-sandbox-plugin-dir", pluginDir, "-sandbox-disk-max", "1G")
	cmd.Env = append(os.Environ(), "FABRO_DATA_DIR="+data)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	done := make(chan struct{})
	stuck := time.AfterFunc(60*time.Second, func() { cmd.Process.Kill() })
	s := &serve{data: data, pid: cmd.Process.Pid}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		logs.Write(append(sc.Bytes(), '\n'))
		var line struct {
			Msg      string `json:"msg"`
			GRPCAddr string `json:"grpc_addr"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "server started" {
			s.grpcAddr = line.GRPCAddr
			break
		}
	}
	stuck.Stop()
	go func() { io.Copy(logs, stderr); cmd.Wait(); close(done) }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cmd.Process.Signal(os.Interrupt)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				cmd.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("fabro serve logs:\n%s", logs)
			}
		})
	}
	t.Cleanup(s.stop)
	if s.grpcAddr == "" {
		t.Fatalf("fabro serve did not start:\n%s", logs)
	}
	tok, err := os.ReadFile(filepath.Join(data, "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	s.token = strings.TrimSpace(string(tok))
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.client = sandboxv1.NewSandboxServiceClient(conn)
	return s
}

// create makes a sandbox, deleted at the end of the test.
func (s *serve) create(t *testing.T, spec *sandboxv1.SandboxSpec) *sandboxv1.Sandbox {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+s.token)
	resp, err := s.client.CreateSandbox(ctx, &sandboxv1.CreateSandboxRequest{Spec: spec})
	if err != nil {
		t.Fatalf("CreateSandbox(%v): %v", spec, err)
	}
	t.Cleanup(func() {
		// t.Context() is cancelled by now.
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+s.token)
		s.client.DeleteSandbox(ctx, &sandboxv1.DeleteSandboxRequest{SandboxId: resp.GetSandbox().GetSandboxId()})
	})
	return resp.GetSandbox()
}

func (s *serve) exec(t *testing.T, sb *sandboxv1.Sandbox, command string) *sandboxv1.ExecResult {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+s.token)
	resp, err := s.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: sb.GetSandboxId(), Spec: &sandboxv1.ExecSpec{Command: command}})
	if err != nil {
		t.Fatalf("Exec(%q): %v", command, err)
	}
	return resp.GetResult()
}

func (s *serve) available(t *testing.T, driver string) bool {
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+s.token)
	resp, err := s.client.ListDrivers(ctx, &sandboxv1.ListDriversRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range resp.GetDrivers() {
		if d.GetDriverId() == driver {
			if !d.GetAvailable() {
				t.Logf("driver %s unavailable: %s", driver, d.GetUnavailableReason())
			}
			return d.GetAvailable()
		}
	}
	return false
}

// TestEscapes runs each hostile command on every driver.
func TestEscapes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the escape suite runs fabro serve as root, as the isolating drivers need")
	}
	s := startServe(t)
	secret := filepath.Join(s.data, "auth", "admin.token")
	if _, err := os.Stat(secret); err != nil {
		t.Fatalf("the plant: %v", err)
	}
	for _, drv := range []string{"local", "bwrap", "docker"} {
		t.Run(drv, func(t *testing.T) {
			if !s.available(t, drv) {
				if drv == "docker" {
					t.Skip("no Docker engine with the sandbox image here (make sandbox-image)")
				}
				t.Fatalf("driver %s is not available on a root fabro serve", drv)
			}
			disk := &sandboxv1.ResourceLimits{DiskBytes: 16 << 20, MaxProcesses: 64}
			a := s.create(t, &sandboxv1.SandboxSpec{Driver: drv, Limits: disk})
			b := s.create(t, &sandboxv1.SandboxSpec{Driver: drv, Limits: disk})

			t.Run("descriptors", func(t *testing.T) {
				// The shell's own descriptors, listed by a child while the
				// shell only waits (a glob would list its own directory's
				// too, and a pipeline the shell's pipes).
				r := s.exec(t, a, `ls /proc/$$/fd; true`)
				if got := strings.Join(strings.Fields(string(r.GetStdout())), " "); got != "0 1 2" {
					t.Errorf("the command's descriptors: %q; want 0 1 2", got)
				}
			})
			t.Run("data directory", func(t *testing.T) {
				r := s.exec(t, a, "cat "+secret+" && echo READ")
				if strings.Contains(string(r.GetStdout()), "READ") {
					t.Errorf("the command read the admin token: %q", r.GetStdout())
				}
			})
			t.Run("another sandbox", func(t *testing.T) {
				if r := s.exec(t, b, "echo b-secret > secret && chmod 644 secret && cat secret"); string(r.GetStdout()) != "b-secret\n" {
					t.Fatalf("the plant: %q %q", r.GetStdout(), r.GetStderr())
				}
				// Where b's workspace is on the host (local, bwrap: the
				// same path; docker: the one path the host knows).
				host := b.GetRootDirectory()
				r := s.exec(t, a, fmt.Sprintf("cat %s/secret; cat /proc/*/root%s/secret 2>/dev/null; echo done", host, host))
				if strings.Contains(string(r.GetStdout()), "b-secret") {
					t.Errorf("sandbox a read sandbox b's file: %q", r.GetStdout())
				}
			})
			t.Run("disk fill", func(t *testing.T) {
				r := s.exec(t, a, "head -c 64m /dev/zero > fill; echo rc=$?")
				if !strings.Contains(string(r.GetStdout()), "rc=1") || r.GetLimitExceeded() != sandboxv1.LimitExceeded_LIMIT_EXCEEDED_DISK {
					t.Errorf("64 MiB into a 16 MiB workspace: %q %q %v; want ENOSPC and LIMIT_EXCEEDED_DISK", r.GetStdout(), r.GetStderr(), r.GetLimitExceeded())
				}
				if r := s.exec(t, a, "rm -f fill; echo ok"); string(r.GetStdout()) != "ok\n" {
					t.Errorf("after the fill: %q", r.GetStdout())
				}
			})
			t.Run("setuid plant", func(t *testing.T) {
				r := s.exec(t, a, "cp /usr/bin/id ./suid && chmod 6755 ./suid && chmod 0755 . && stat -c %a suid")
				if string(r.GetStdout()) != "6755\n" {
					t.Fatalf("the plant: %q %q", r.GetStdout(), r.GetStderr())
				}
				if drv == "docker" {
					return // the host path is the engine's; the container has no-new-privileges
				}
				cmd := exec.Command(filepath.Join(a.GetRootDirectory(), "suid"), "-u")
				cmd.SysProcAttr = nobody()
				if out, err := cmd.Output(); err == nil && strings.TrimSpace(string(out)) != "65534" {
					t.Errorf("nobody ran the plant and got euid %s", out)
				}
			})
			t.Run("fork bomb", func(t *testing.T) {
				r := s.exec(t, a, `timeout 4 bash -c 'b() { b | b & }; b; sleep 3' 2>/dev/null; echo survived`)
				if r.GetLimitExceeded() != sandboxv1.LimitExceeded_LIMIT_EXCEEDED_PROCESSES {
					t.Errorf("a fork bomb under max_processes 64: %v %q", r.GetLimitExceeded(), r.GetStdout())
				}
				if r := s.exec(t, a, "echo ok"); string(r.GetStdout()) != "ok\n" {
					t.Errorf("after the fork bomb: %q", r.GetStdout())
				}
			})
			t.Run("symlink swap under Grep", func(t *testing.T) {
				if testing.Short() {
					t.Skip("200 Grep calls against a swapping command: not in -short")
				}
				grepRace(t, s, drv, secret)
			})
			if drv == "local" {
				return // the host's network is the local driver's by design
			}
			t.Run("loopback and host addresses", func(t *testing.T) {
				nsb := s.create(t, &sandboxv1.SandboxSpec{Driver: drv, Limits: &sandboxv1.ResourceLimits{Network: sandboxv1.NetworkPolicy_NETWORK_POLICY_ALLOW}})
				// The service's own port on loopback, and a listener on every
				// host address (the plant: the host reaches each).
				_, port, _ := strings.Cut(s.grpcAddr, ":")
				ln, err := net.Listen("tcp", "0.0.0.0:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						c.Close()
					}
				}()
				lport := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
				targets := []string{"127.0.0.1:" + port}
				for _, ip := range hostAddrs(t) {
					if c, err := net.DialTimeout("tcp", ip+":"+lport, time.Second); err == nil {
						c.Close()
						targets = append(targets, ip+":"+lport)
					}
				}
				if len(targets) == 1 {
					t.Fatal("the plant: the listener answers on no host address")
				}
				for _, tgt := range targets {
					host, p, _ := strings.Cut(tgt, ":")
					r := s.exec(t, nsb, fmt.Sprintf("timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s' 2>/dev/null && echo connected", host, p))
					if strings.Contains(string(r.GetStdout()), "connected") {
						t.Errorf("a sandbox allowed the network reached the service at %s", tgt)
					}
				}
			})
		})
	}
}

func hostAddrs(t *testing.T) []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}

// grepRace: while a command swaps its directories for links to the data
// directory's auth directory and back, 200 Grep calls for the admin token
// find it only in the workspace's own files.
func grepRace(t *testing.T, s *serve, drv, secret string) {
	sb := s.create(t, &sandboxv1.SandboxSpec{Driver: drv})
	const dirs = 8
	if r := s.exec(t, sb, fmt.Sprintf(`for i in $(seq 0 %d); do mkdir d$i && echo '%s inside' > d$i/inside.txt; done; echo planted`, dirs-1, s.token)); string(r.GetStdout()) != "planted\n" {
		t.Fatalf("the plant: %q %q", r.GetStdout(), r.GetStderr())
	}
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+s.token))
	swapped := make(chan struct{})
	go func() {
		defer close(swapped)
		s.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: sb.GetSandboxId(), Spec: &sandboxv1.ExecSpec{Timeout: durationpb.New(10 * time.Minute), Command: fmt.Sprintf(`perl -e '
			my ($n, $secret) = (%d, "%s");
			symlink($secret, "l$_") for 0 .. $n - 1;
			while (1) {
				for (0 .. $n - 1) { rename("d$_", "r$_"); rename("l$_", "d$_") }
				for (0 .. $n - 1) { rename("d$_", "l$_"); rename("r$_", "d$_") }
			}'`, dirs, filepath.Dir(secret))}})
	}()
	defer func() { cancel(); <-swapped }()
	// The plant: the swapper runs (its links are there) before Grep does.
	for i := 0; ; i++ {
		if r := s.exec(t, sb, "ls -d l* r* 2>/dev/null | head -1"); len(r.GetStdout()) > 0 {
			break
		}
		if i == 100 {
			t.Fatal("the swapper never started: the race would prove nothing")
		}
		time.Sleep(100 * time.Millisecond)
	}
	gctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+s.token)
	inside, outside := 0, 0
	for range 200 {
		resp, err := s.client.Grep(gctx, &sandboxv1.GrepRequest{SandboxId: sb.GetSandboxId(), Pattern: s.token, MaxResults: 20})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range resp.GetMatches() {
			if strings.Contains(m.GetLine(), "inside") {
				inside++
			} else {
				outside++
			}
		}
	}
	if outside > 0 {
		t.Errorf("Grep returned %d lines of the admin token from outside the sandbox (%d inside)", outside, inside)
	}
	if inside == 0 {
		t.Error("Grep never found the lines inside: the race proved nothing")
	}
}
