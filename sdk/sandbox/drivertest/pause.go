package drivertest

import (
	"context"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// pauseWindow is how long a paused sandbox is watched for progress: a
// command that writes every 10 ms would write many times in it.
const pauseWindow = 300 * time.Millisecond

// RunPause checks the pause facet on a driver that states it: a paused
// sandbox's command and the child it put in the background make no
// progress, and do again once resumed; both calls are idempotent; a
// paused sandbox can be deleted, and its stopped commands then end.
func RunPause(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	d := newDriver(t)
	if !d.Capabilities().Pause {
		t.Skip("the driver states no Pause capability")
	}
	sb := NewSandbox(t, d, driver.Spec{})
	pz, ok := sb.(driver.Pauser)
	if !ok {
		t.Fatal("the driver states Pause but its sandboxes are no driver.Pauser")
	}
	// ticking runs a command that prints a tick and, from a background
	// child, appends to bg every 10 ms; it returns what tells how far
	// both got, and the command's end.
	ticking := func(t *testing.T, sb driver.Sandbox) (progress func() (int, int64), ended chan driver.ExecResult, stop context.CancelFunc) {
		t.Helper()
		rec := &recorder{}
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(t.Context()))
		ended = make(chan driver.ExecResult, 1)
		go func() {
			res, _ := sb.Exec(ctx, driver.ExecSpec{Command: `(while :; do echo x >> bg; sleep 0.01; done) & while :; do echo tick; sleep 0.01; done`,
				Timeout: 2 * time.Minute, RetainLimit: 1 << 10}, rec)
			ended <- res
		}()
		rec.waitFor(t, "tick\ntick\n")
		progress = func() (int, int64) {
			rec.mu.Lock()
			n := rec.out.Len()
			rec.mu.Unlock()
			fi, _ := sb.Stat(t.Context(), "bg")
			return n, fi.Size
		}
		stop = func() { cancel(driver.ErrKill) }
		t.Cleanup(func() { sb.(driver.Pauser).Resume(context.WithoutCancel(t.Context())); stop(); <-ended })
		return progress, ended, stop
	}
	t.Run("paused makes no progress, resumed does", func(t *testing.T) {
		progress, _, _ := ticking(t, sb)
		if err := pz.Pause(t.Context()); err != nil {
			t.Fatalf("Pause: %v", err)
		}
		if err := pz.Pause(t.Context()); err != nil {
			t.Errorf("Pause of a paused sandbox: %v", err)
		}
		out0, bg0 := progress()
		time.Sleep(pauseWindow)
		if out1, bg1 := progress(); out1 != out0 || bg1 != bg0 {
			t.Errorf("paused for %v: output %d -> %d bytes, the background child's file %d -> %d", pauseWindow, out0, out1, bg0, bg1)
		}
		if fi, err := sb.Stat(t.Context(), "bg"); err != nil || fi.Type != driver.TypeFile {
			t.Errorf("Stat while paused: %v, %v", fi, err)
		}
		if err := pz.Resume(t.Context()); err != nil {
			t.Fatalf("Resume: %v", err)
		}
		if err := pz.Resume(t.Context()); err != nil {
			t.Errorf("Resume of a resumed sandbox: %v", err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			out1, bg1 := progress()
			if out1 > out0 && bg1 > bg0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("resumed: output %d -> %d bytes, the background child's file %d -> %d", out0, out1, bg0, bg1)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := Sh(t, sb, "echo after"); got != "after\n" {
			t.Errorf("Exec after Resume: %q", got)
		}
	})
	t.Run("a paused sandbox can be deleted", func(t *testing.T) {
		sb2, err := d.Create(t.Context(), driver.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		_, ended, stop := ticking(t, sb2)
		if err := sb2.(driver.Pauser).Pause(t.Context()); err != nil {
			t.Fatalf("Pause: %v", err)
		}
		// As the service deletes: its commands are stopped (which a
		// frozen command may only see once Delete thaws it), then Delete.
		stop()
		if err := sb2.Delete(t.Context()); err != nil {
			t.Fatalf("Delete of a paused sandbox: %v", err)
		}
		select {
		case res := <-ended:
			ended <- res
			if res.Termination == driver.Exited && res.ExitCode != nil && *res.ExitCode == 0 {
				t.Errorf("after Delete the command exited 0")
			}
		case <-time.After(time.Minute):
			t.Fatal("the paused sandbox's command did not end within a minute of Delete")
		}
	})
}
