package local_test

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
)

// TestOpenFIFO: a command's named pipe, read through the file RPCs, is
// refused at once. Opened as it was, open(2) waited for a writer that
// never came: each call kept a service thread for good, and enough of them
// end the service (Go's thread limit).
func TestOpenFIFO(t *testing.T) {
	sb := drivertest.NewSandbox(t, newDriver(t), driver.Spec{})
	if err := syscall.Mkfifo(filepath.Join(sb.Info().RootDirectory, "pipe"), 0o644); err != nil {
		t.Fatalf("the plant: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		rc, _, err := sb.(driver.Files).Open(t.Context(), "pipe", 0)
		if err == nil {
			rc.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("Open of a named pipe: %v; want ErrInvalid", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Open of a named pipe still waits after 30s")
	}
}
