package driver_test

import (
	"syscall"
	"testing"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

func TestSignalName(t *testing.T) {
	tests := []struct {
		n    int
		want string
	}{
		{int(syscall.SIGKILL), "SIGKILL"}, {int(syscall.SIGTERM), "SIGTERM"}, {int(syscall.SIGSEGV), "SIGSEGV"},
		{int(syscall.SIGXCPU), "SIGXCPU"}, {int(syscall.SIGSYS), "SIGSYS"}, {34, "SIG34"}, {0, "SIG0"},
	}
	for _, tt := range tests {
		if got := driver.SignalName(tt.n); got != tt.want {
			t.Errorf("SignalName(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
