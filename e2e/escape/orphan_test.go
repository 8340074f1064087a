package escape

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
)

// TestNothingOutlivesAKilledService: fabro serve killed with SIGKILL
// while a bwrap command runs leaves no process behind: not the plugin
// (once left to init, serving no one, for good), not the command.
func TestNothingOutlivesAKilledService(t *testing.T) {
	s := rootServe(t)
	if !s.available(t, "bwrap") {
		t.Fatal("bwrap is not available on a root fabro serve")
	}
	sb := s.create(t, &sandboxv1.SandboxSpec{Driver: "bwrap"})
	const marker = "sleep 997.25"
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+s.token)
	go s.client.Exec(ctx, &sandboxv1.ExecRequest{SandboxId: sb.GetSandboxId(), Spec: &sandboxv1.ExecSpec{Command: marker, Timeout: durationpb.New(time.Hour)}})
	var plugin, command int
	for i := 0; plugin == 0 || command == 0; i++ {
		if i == 200 {
			t.Fatalf("the plant: plugin %d, command %d not found", plugin, command)
		}
		time.Sleep(50 * time.Millisecond)
		for _, p := range procs() {
			switch {
			case p.ppid == s.pid && strings.Contains(p.cmdline, "fabro-sandbox-bwrap"):
				plugin = p.pid
			case p.cmdline == marker:
				command = p.pid
			}
		}
	}
	if err := syscall.Kill(s.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, pid := range []int{plugin, command} {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("pid %d (%s) outlived the killed service by 15s", pid, cmdline(pid))
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

type proc struct {
	pid, ppid int
	cmdline   string
}

func procs() []proc {
	ents, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		out = append(out, proc{pid, ppid, cmdline(pid)})
	}
	return out
}

func cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// alive: running, not a zombie (a zombie left to init is init's to reap).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && len(b) > i+2 && b[i+2] != 'Z'
}
