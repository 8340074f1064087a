package drivertest

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// waitFor waits until r's output holds want.
func (r *recorder) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		got := r.out.String()
		r.mu.Unlock()
		if strings.Contains(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("output %q never held %q", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitEnd is p.Wait, failing t past a minute.
func waitEnd(t *testing.T, p driver.Process) driver.ExecResult {
	t.Helper()
	ch := make(chan driver.ExecResult, 1)
	go func() { ch <- p.Wait() }()
	select {
	case res := <-ch:
		return res
	case <-time.After(time.Minute):
		t.Fatal("the process did not end within a minute")
		return driver.ExecResult{}
	}
}

// RunProcesses checks the processes facet on a driver that states it: a
// driver that does not is checked to offer none.
func RunProcesses(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	d := newDriver(t)
	sb := NewSandbox(t, d, driver.Spec{})
	ps, ok := sb.(driver.ProcessStarter)
	if !d.Capabilities().Processes {
		// Honest both ways: the service refuses every process call then.
		t.Skip("the driver states no Processes capability")
	}
	if !ok {
		t.Fatal("the driver states Processes but its sandboxes are no driver.ProcessStarter")
	}
	start := func(t *testing.T, sb driver.ProcessStarter, command string) (driver.Process, *recorder) {
		t.Helper()
		rec := &recorder{}
		p, err := sb.StartProcess(t.Context(), driver.ProcessSpec{Command: command}, rec)
		if err != nil {
			t.Fatalf("StartProcess(%q): %v", command, err)
		}
		t.Cleanup(func() { p.Signal(syscall.SIGKILL); p.Wait() })
		return p, rec
	}
	t.Run("interactive stdin", func(t *testing.T) {
		p, rec := start(t, ps, `while read -r l; do echo "got $l"; echo "err $l" >&2; done; echo eof`)
		if !rec.started {
			t.Error("Started was not called before StartProcess returned")
		}
		for _, l := range []string{"one", "two", "three"} {
			if _, err := p.Stdin().Write([]byte(l + "\n")); err != nil {
				t.Fatal(err)
			}
			rec.waitFor(t, "got "+l+"\n")
			rec.waitFor(t, "err "+l+"\n")
		}
		p.Stdin().Close()
		res := waitEnd(t, p)
		rec.waitFor(t, "eof\n")
		if res.Termination != driver.Exited || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Errorf("after stdin closed: %s exit %s signal %s", termName(res.Termination), ptr(res.ExitCode), res.Signal)
		}
		if ok, err := p.Signal(syscall.SIGTERM); ok || err != nil {
			t.Errorf("Signal after the end = %v, %v; want false, nil", ok, err)
		}
	})
	t.Run("signal reaches the process", func(t *testing.T) {
		p, rec := start(t, ps, `trap 'echo term; exit 7' TERM; echo up; while :; do sleep 0.05; done`)
		rec.waitFor(t, "up\n")
		if ok, err := p.Signal(syscall.SIGTERM); !ok || err != nil {
			t.Fatalf("Signal(TERM) = %v, %v", ok, err)
		}
		res := waitEnd(t, p)
		if res.ExitCode == nil || *res.ExitCode != 7 {
			t.Errorf("after TERM: %s exit %s signal %s, want exit 7", termName(res.Termination), ptr(res.ExitCode), res.Signal)
		}
	})
	t.Run("other signals reach the group", func(t *testing.T) {
		p, rec := start(t, ps, `trap 'echo int; exit 5' INT; echo up; while :; do sleep 0.05; done`)
		rec.waitFor(t, "up\n")
		if ok, err := p.Signal(syscall.SIGINT); !ok || err != nil {
			t.Fatalf("Signal(INT) = %v, %v", ok, err)
		}
		res := waitEnd(t, p)
		rec.waitFor(t, "int\n")
		if res.ExitCode == nil || *res.ExitCode != 5 {
			t.Errorf("after INT: %s exit %s signal %s, want exit 5", termName(res.Termination), ptr(res.ExitCode), res.Signal)
		}
	})
	t.Run("kill takes the whole tree", func(t *testing.T) {
		// The children hold the output pipes: Wait returns only once they
		// are gone too.
		p, rec := start(t, ps, `sleep 1000 & sleep 1000 & echo up; wait`)
		rec.waitFor(t, "up\n")
		if ok, err := p.Signal(syscall.SIGKILL); !ok || err != nil {
			t.Fatalf("Signal(KILL) = %v, %v", ok, err)
		}
		if res := waitEnd(t, p); res.Termination != driver.Killed || res.Signal != "SIGKILL" {
			t.Errorf("after KILL: %s exit %s signal %s, want KILLED by SIGKILL", termName(res.Termination), ptr(res.ExitCode), res.Signal)
		}
	})
	t.Run("terminal", func(t *testing.T) {
		if !d.Capabilities().Terminals {
			t.Skip("the driver states no Terminals capability")
		}
		rec := &recorder{}
		p, err := ps.StartProcess(t.Context(), driver.ProcessSpec{Command: `stty size; read -r l; stty size; echo "got $l"`, Terminal: &driver.TerminalSize{Rows: 24, Cols: 80}}, rec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Signal(syscall.SIGKILL); p.Wait() })
		rec.waitFor(t, "24 80")
		r, ok := p.(driver.Resizer)
		if !ok {
			t.Fatal("a process on a terminal is no driver.Resizer")
		}
		if err := r.Resize(driver.TerminalSize{Rows: 40, Cols: 100}); err != nil {
			t.Fatal(err)
		}
		p.Stdin().Write([]byte("typed\r"))
		rec.waitFor(t, "got typed")
		rec.waitFor(t, "40 100")
		res := waitEnd(t, p)
		if res.Termination != driver.Exited || res.ExitCode == nil || *res.ExitCode != 0 {
			t.Errorf("on a terminal: %s exit %s signal %s, want exit 0", termName(res.Termination), ptr(res.ExitCode), res.Signal)
		}
		rec.mu.Lock()
		out := rec.out.String()
		rec.mu.Unlock()
		if strings.ContainsRune(out, 0) {
			t.Errorf("the terminal's output holds a NUL (a driver's own status?): %q", out)
		}
	})
	t.Run("terminal interrupt", func(t *testing.T) {
		// ^C reaches the command: it is the terminal's foreground group.
		if !d.Capabilities().Terminals {
			t.Skip("the driver states no Terminals capability")
		}
		rec := &recorder{}
		p, err := ps.StartProcess(t.Context(), driver.ProcessSpec{Command: `echo up; sleep 1000; echo "not interrupted"`, Terminal: &driver.TerminalSize{Rows: 24, Cols: 80}}, rec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Signal(syscall.SIGKILL); p.Wait() })
		rec.waitFor(t, "up")
		p.Stdin().Write([]byte{3}) // ^C
		res := waitEnd(t, p)
		if res.Signal != "SIGINT" && (res.ExitCode == nil || *res.ExitCode != 130) {
			t.Errorf("after ^C: %s exit %s signal %s, want SIGINT", termName(res.Termination), ptr(res.ExitCode), res.Signal)
		}
	})
	t.Run("processes end with their sandbox", func(t *testing.T) {
		sb2, err := d.Create(t.Context(), driver.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		p, rec := start(t, sb2.(driver.ProcessStarter), `sleep 1000 & echo up; wait`)
		rec.waitFor(t, "up\n")
		if err := sb2.Delete(t.Context()); err != nil {
			t.Fatal(err)
		}
		if res := waitEnd(t, p); res.Termination == driver.Exited && res.ExitCode != nil && *res.ExitCode == 0 {
			t.Errorf("after Delete the process exited 0")
		}
	})
}
