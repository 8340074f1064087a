package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/testkit"
)

// liveWithArg lists the live (not zombie) processes whose command line
// holds arg as one of its words.
func liveWithArg(arg string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(append([]byte{0}, cl...), []byte("\x00"+arg+"\x00")) {
			continue
		}
		if st, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && f[0] == "Z" {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}

// TestKill9LeavesNoOrphan kills the sandbox service with SIGKILL while a
// command runs in a local and in a docker sandbox, a bash with two
// children (one it waits for, one in the background). The local bash dies
// with the service (its parent-death signal); the restarted service kills
// what outlived it: the local command's children, through the dead
// instance's cgroups, and the docker command, in the container it
// re-adopts.
func TestKill9LeavesNoOrphan(t *testing.T) {
	bin := buildService(t)
	dataDir, addr := t.TempDir(), freeAddr(t)
	t.Cleanup(func() { removeContainers("fabro-sandbox:" + dataDir) })
	first := startProc(t, bin, dataDir, addr)
	// Durations no other process uses, to find the commands' processes by.
	tag := strconv.Itoa(int(time.Now().UnixNano() % 1e6))
	var args []string
	for i, drv := range dockerDrivers("local", "docker") {
		created, err := first.client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: drv}})
		if err != nil {
			t.Fatalf("%s: %v", drv, err)
		}
		bg, fg := fmt.Sprintf("600.%d1%s", i, tag), fmt.Sprintf("600.%d2%s", i, tag)
		args = append(args, bg, fg)
		execErr := make(chan error, 1)
		go func() {
			_, err := first.client.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: created.GetSandbox().GetSandboxId(), Spec: &sandboxv1.ExecSpec{
				Command: "sleep " + bg + " & sleep " + fg + "; wait", Timeout: durationpb.New(time.Hour)}})
			execErr <- err
		}()
		testkit.Eventually(t, 30*time.Second, func() error {
			if len(liveWithArg(bg)) == 1 && len(liveWithArg(fg)) == 1 {
				return nil
			}
			select {
			case err := <-execErr:
				execErr <- err // and again at the next call
				return fmt.Errorf("%s: the command's sleeps did not start: Exec: %v", drv, err)
			default:
				return fmt.Errorf("%s: the command's sleeps did not start: %v %v", drv, liveWithArg(bg), liveWithArg(fg))
			}
		})
	}
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.cmd.Wait()
	startProc(t, bin, dataDir, addr)
	testkit.Eventually(t, 30*time.Second, func() error {
		var left []string
		for _, a := range args {
			if pids := liveWithArg(a); len(pids) > 0 {
				left = append(left, fmt.Sprintf("sleep %s: %v", a, pids))
			}
		}
		if len(left) > 0 {
			return errors.New("after the restart the commands' processes live on: " + strings.Join(left, ", "))
		}
		return nil
	})
}

// TestServicesShareAHost runs two sandbox service processes on one host,
// and this test's own service beside them, all in one cgroup: each runs 50
// Execs while another is started and stopped again and again (SIGKILL and
// SIGTERM), and not one Exec fails. A starting service must not remove,
// kill or confuse the others' commands.
func TestServicesShareAHost(t *testing.T) {
	bin := buildService(t)
	type svc struct {
		p       *proc
		dataDir string
		addr    string
	}
	up := func(dataDir, addr string) *svc { return &svc{startProc(t, bin, dataDir, addr), dataDir, addr} }
	a, b := up(t.TempDir(), freeAddr(t)), up(t.TempDir(), freeAddr(t))
	inproc := start(t)
	execs := func(c sandboxv1.SandboxServiceClient) error {
		created, err := c.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local"}})
		if err != nil {
			return err
		}
		id := created.GetSandbox().GetSandboxId()
		errs := make(chan error, 50)
		var wg sync.WaitGroup
		for w := range 10 {
			wg.Go(func() {
				for k := range 5 {
					want := fmt.Sprintf("%d-%d", w, k)
					resp, err := c.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "(sleep 0.01 &); echo " + want}})
					switch {
					case err != nil:
						errs <- fmt.Errorf("Exec: %v (%s)", err, status.Code(err))
					case strings.TrimSpace(string(resp.GetResult().GetStdout())) != want || resp.GetResult().GetExitCode() != 0:
						errs <- fmt.Errorf("Exec: %v", resp.GetResult())
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			return err
		}
		return nil
	}
	// churn stops and starts s until done is closed.
	churn := func(s *svc, done <-chan struct{}) {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			sig := syscall.SIGKILL
			if i%2 == 1 {
				sig = syscall.SIGTERM
			}
			s.p.cmd.Process.Signal(sig)
			s.p.cmd.Wait()
			s.p = startProc(t, bin, s.dataDir, s.addr)
		}
	}
	for _, tc := range []struct {
		name        string
		run, others []*svc
		runInproc   bool
	}{
		{"a runs, b churns", []*svc{a}, []*svc{b}, true},
		{"b runs, a churns", []*svc{b}, []*svc{a}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var churners sync.WaitGroup
			for _, o := range tc.others {
				churners.Go(func() { churn(o, done) })
			}
			var wg sync.WaitGroup
			for _, r := range tc.run {
				wg.Go(func() {
					if err := execs(r.p.client); err != nil {
						t.Error(err)
					}
				})
			}
			if tc.runInproc {
				wg.Go(func() {
					if err := execs(inproc.client); err != nil {
						t.Errorf("the test's own service: %v", err)
					}
				})
			}
			wg.Wait()
			close(done)
			churners.Wait()
		})
	}
}

// TestConcurrentExecs runs 100 Execs at once on 10 local sandboxes, three
// rounds: every one succeeds, with its own output.
func TestConcurrentExecs(t *testing.T) {
	h := start(t)
	var ids []string
	for range 10 {
		ids = append(ids, h.create(t, &sandboxv1.SandboxSpec{}).GetSandboxId())
	}
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			for round := range 3 {
				want := fmt.Sprintf("%d/%d", i, round)
				resp, err := h.client.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: ids[i%10], Spec: &sandboxv1.ExecSpec{Command: "echo " + want + "; (sleep 0.01 &)"}})
				if err != nil {
					t.Errorf("Exec %s: %v", want, err)
					return
				}
				if got := strings.TrimSpace(string(resp.GetResult().GetStdout())); got != want || resp.GetResult().GetExitCode() != 0 {
					t.Errorf("Exec %s: %q, exit %d", want, got, resp.GetResult().GetExitCode())
				}
			}
		})
	}
	wg.Wait()
}

// TestCommandDescriptors: a command has stdin, stdout and stderr and no
// other descriptor, even while the service has descriptors open without
// O_CLOEXEC, files open for searches (Grep passes one to its search
// program) and other commands' pipes.
func TestCommandDescriptors(t *testing.T) {
	h := start(t)
	sb := h.create(t, &sandboxv1.SandboxSpec{})
	id := sb.GetSandboxId()
	os.WriteFile(filepath.Join(sb.GetRootDirectory(), "f.txt"), []byte("needle\n"), 0o644)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var busy sync.WaitGroup
	for range 4 {
		busy.Go(func() {
			for ctx.Err() == nil {
				h.client.Grep(ctx, &sandboxv1.GrepRequest{SandboxId: id, Pattern: "needle"})
				h.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: "sleep 0.01"}})
			}
		})
	}
	// bash's own descriptors, as the kernel lists them (the trailing true
	// keeps bash from exec'ing ls, which has one more: the directory).
	for range 30 {
		// A descriptor opened without O_CLOEXEC, as a launcher leaves
		// them or cgo opens them.
		stray, err := syscall.Open("/dev/null", syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(stray)
		resp, err := h.client.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{
			Command: `ls /proc/$$/fd; ls -l /proc/$$/fd >&2; true`}})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(strings.Fields(string(resp.GetResult().GetStdout())), " "); got != "0 1 2" {
			t.Fatalf("the command's descriptors are %q, want 0 1 2: %s", got, resp.GetResult().GetStderr())
		}
	}
	cancel()
	busy.Wait()
}
