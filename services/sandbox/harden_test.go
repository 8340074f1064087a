package sandbox

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

const dumpableHelper = "FABRO_SANDBOX_TEST_DUMPABLE"

// TestNonDumpableEnvironment is the case of a service that is not root:
// its commands share its user, and only non-dumpability keeps its
// environment from them. A copy of this test binary plays the service (as
// nobody when the test runs as root) and a command of the same user tries
// to read its environment.
func TestNonDumpableEnvironment(t *testing.T) {
	if os.Getenv(dumpableHelper) != "" {
		return // the helper's work is done in TestMain-free init below
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "dumpable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper")
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	src.Close()
	dst.Close()
	for _, dumpable := range []bool{true, false} {
		cmd := exec.CommandContext(t.Context(), bin, "-test.run=^TestNonDumpableEnvironment$")
		cmd.Env = []string{dumpableHelper + "=" + strconv.FormatBool(dumpable), "PATH=" + os.Getenv("PATH"), "SECRET_OF_THE_SERVICE=CANARY-dump-42"}
		if os.Geteuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		}
		out, _ := cmd.CombinedOutput()
		leaked := strings.Contains(string(out), "CANARY-dump-42")
		switch {
		case dumpable && !leaked:
			t.Fatalf("control: a dumpable service's environment was not readable, so this test proves nothing:\n%s", out)
		case !dumpable && leaked:
			t.Errorf("a command read the non-dumpable service's environment:\n%s", out)
		case !dumpable && !strings.Contains(string(out), "command exit:"):
			t.Errorf("the helper did not run its command:\n%s", out)
		}
	}
}

// The helper: harden (unless told to stay dumpable), then run a command
// of the same user that reads this process's environment.
func init() {
	v := os.Getenv(dumpableHelper)
	if v == "" {
		return
	}
	if v == "false" {
		if err := harden(""); err != nil {
			fmt.Println("harden:", err)
			os.Exit(1)
		}
	}
	out, err := exec.Command("cat", "/proc/"+strconv.Itoa(os.Getpid())+"/environ").CombinedOutput()
	fmt.Printf("%s\ncommand exit: %v\n", out, err)
	os.Exit(0)
}
