package sandbox_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/services/sandbox"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// testUIDs is a range of uids no account of this host has, one per test
// process, so that test runs side by side do not share it.
func testUIDs(t *testing.T) *local.UIDs {
	first := uint32(1_500_000_000 + os.Getpid()%100_000*1000)
	return local.NewUIDs(first, first+999)
}

// TestSandboxesCannotReadEachOther: with -sandbox-uids, every managed
// local and docker sandbox has a uid of its own, which owns its workspace
// (0700) and has no passwd entry: a command of one sandbox cannot read,
// list or change another's workspace, whatever the driver, nor the data
// directory; and no grant is made per sandbox on the directories above
// the workspaces, so deleting one leaves none behind.
func TestSandboxesCannotReadEachOther(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandbox uids are given only when the service runs as root")
	}
	const canary = "CANARY-neighbour-5c1d"
	dataDir := filepath.Join(t.TempDir(), "data")
	t.Cleanup(func() { removeContainers("fabro-sandbox:" + dataDir) })
	uids := testUIDs(t)
	client := startWith(t, sandbox.Config{DataDir: dataDir, Security: sandbox.Security{UIDs: uids}})
	// As the other services keep their files: the sandboxes' group may
	// pass through the data directory to the workspaces, never list it.
	os.WriteFile(filepath.Join(dataDir, "secret"), []byte(canary), 0o600)
	type sb struct{ id, drv, hostDir string }
	var sbs []sb
	for _, drv := range dockerDrivers("local", "local", "docker", "docker") {
		resp, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: drv}})
		if err != nil {
			t.Fatalf("%s: %v", drv, err)
		}
		s := sb{id: resp.GetSandbox().GetSandboxId(), drv: drv, hostDir: resp.GetSandbox().GetRootDirectory()}
		if drv == "docker" {
			dirs, _ := filepath.Glob(filepath.Join(dataDir, "sandbox", "docker", "docker-"+s.id))
			if len(dirs) != 1 {
				t.Fatalf("no host workspace for %s", s.id)
			}
			s.hostDir = dirs[0]
		}
		sbs = append(sbs, s)
	}
	run := func(s sb, cmd string) (int32, string) {
		t.Helper()
		resp, err := client.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: s.id, Spec: &sandboxv1.ExecSpec{Command: cmd}})
		if err != nil {
			t.Fatalf("Exec(%q) in %s: %v", cmd, s.drv, err)
		}
		return resp.GetResult().GetExitCode(), string(resp.GetResult().GetStdout()) + string(resp.GetResult().GetStderr())
	}
	seen := map[uint32]bool{}
	for _, s := range sbs {
		// Planted by the sandbox itself, world-readable: only the
		// workspace's own mode keeps it from the neighbours.
		if code, out := run(s, "echo "+canary+"-"+s.id+" > mine && chmod 644 mine"); code != 0 {
			t.Fatalf("planting in %s: %s", s.drv, out)
		}
		fi, err := os.Stat(s.hostDir)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !uids.Contains(st.Uid) || seen[st.Uid] || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s workspace %s: uid %d mode %v; want a uid of the range of its own, 0700", s.drv, s.hostDir, st.Uid, fi.Mode().Perm())
		}
		seen[st.Uid] = true
		if code, out := run(s, "id -u"); strings.TrimSpace(out) != fmt.Sprint(st.Uid) || code != 0 {
			t.Errorf("%s: commands run as %q, want the workspace's owner %d", s.drv, out, st.Uid)
		}
	}
	for _, from := range sbs {
		if from.drv != "local" {
			continue // a container sees no host path at all
		}
		for _, to := range sbs {
			if to == from {
				continue
			}
			for _, attack := range []string{"cat " + to.hostDir + "/mine", "ls " + to.hostDir, "touch " + to.hostDir + "/planted",
				"cat " + filepath.Join(dataDir, "secret"), "ls " + dataDir, "ls " + filepath.Join(dataDir, "sandbox", "workspaces"), "ls " + filepath.Join(dataDir, "sandbox", "docker")} {
				if code, out := run(from, attack); code == 0 || strings.Contains(out, canary) {
					t.Errorf("%s sandbox: %s: exit %d, %q; want denied", from.drv, attack, code, out)
				}
			}
		}
	}
	// The one grant above the workspaces is the range's group's.
	for _, dir := range []string{dataDir, filepath.Join(dataDir, "sandbox")} {
		if acl := aclUsers(t, dir); len(acl) > 0 {
			t.Errorf("%s grants users %v; want the sandboxes' group alone", dir, acl)
		}
	}
	for _, s := range sbs {
		if _, err := client.DeleteSandbox(t.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: s.id}); err != nil {
			t.Fatal(err)
		}
	}
}

// aclUsers lists the named users of dir's access ACL.
func aclUsers(t *testing.T, dir string) []uint32 {
	t.Helper()
	b := make([]byte, 1024)
	n, err := syscall.Getxattr(dir, "system.posix_acl_access", b)
	if err != nil {
		return nil
	}
	var out []uint32
	for e := b[4:n]; len(e) >= 8; e = e[8:] {
		if tag := uint16(e[0]) | uint16(e[1])<<8; tag == 0x02 {
			out = append(out, uint32(e[4])|uint32(e[5])<<8|uint32(e[6])<<16|uint32(e[7])<<24)
		}
	}
	return out
}

// TestSymlinkSwapRace: a command swaps a directory of its workspace for a
// link to a root-only directory, over and over, while Grep, Glob and
// ReadFile run on it: in at least 200 calls of each, on the local and the
// docker driver, not one byte or name from outside comes back.
func TestSymlinkSwapRace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the outside must be closed to the commands' user: the service runs as root")
	}
	const canary = "CANARY-outside-93be"
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	os.Mkdir(outside, 0o700)
	os.WriteFile(filepath.Join(outside, "f"), []byte(canary+"\n"), 0o600)
	os.WriteFile(filepath.Join(outside, canary+".txt"), []byte(canary+"\n"), 0o600)
	dataDir := filepath.Join(base, "data")
	t.Cleanup(func() { removeContainers("fabro-sandbox:" + dataDir) })
	client := startWith(t, sandbox.Config{DataDir: dataDir, Security: sandbox.Security{UIDs: testUIDs(t)}})
	for _, drv := range dockerDrivers("local", "docker") {
		t.Run(drv, func(t *testing.T) {
			resp, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: drv}})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.GetSandbox().GetSandboxId()
			// In the container the link leads to the container's own
			// path; the host-side search is what it aims at.
			// Four directories, each swapped with a link by renames, so
			// that the window between a search's look at an entry and its
			// open of it is hit often.
			swap := `for i in 1 2 3 4; do mkdir -p d$i && echo inside > d$i/f && ln -sfn ` + outside + ` l$i; ` +
				`(while :; do mv d$i t$i; mv l$i d$i; mv d$i l$i; mv t$i d$i; done) & done; wait`
			go client.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: swap}})
			t.Cleanup(func() { client.DeleteSandbox(t.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: id}) })
			var wg sync.WaitGroup
			leak := func(what string, got string) {
				if strings.Contains(got, canary) {
					t.Errorf("%s read outside the workspace: %q", what, got)
				}
			}
			wg.Go(func() {
				for range 200 {
					g, _ := client.Grep(t.Context(), &sandboxv1.GrepRequest{SandboxId: id, Pattern: "CANARY|inside"})
					leak("Grep", g.String())
				}
			})
			wg.Go(func() {
				for range 200 {
					g, _ := client.Glob(t.Context(), &sandboxv1.GlobRequest{SandboxId: id, Pattern: "**/*"})
					leak("Glob", g.String())
				}
			})
			wg.Go(func() {
				for range 200 {
					r, _ := client.ReadFile(t.Context(), &sandboxv1.ReadFileRequest{SandboxId: id, Path: "d1/f"})
					leak("ReadFile", r.String())
				}
			})
			wg.Wait()
		})
	}
}

// TestPlantedSetuidGivesNoUID: a local sandbox's setuid copy of bash, left
// in /tmp after the sandbox is deleted and its uid given to a new sandbox,
// does not let another sandbox's command become that uid and read the new
// sandbox's workspace (commands run with no_new_privs).
func TestPlantedSetuidGivesNoUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandbox uids are given only when the service runs as root")
	}
	const canary = "CANARY-reused-uid-77a1"
	// Two sandbox uids: the third sandbox gets the first's.
	first := uint32(1_600_000_000 + os.Getpid()%100_000*10)
	client := startWith(t, sandbox.Config{DataDir: filepath.Join(t.TempDir(), "data"), Security: sandbox.Security{UIDs: local.NewUIDs(first, first+2)}})
	create := func() (string, string) {
		t.Helper()
		resp, err := client.CreateSandbox(t.Context(), &sandboxv1.CreateSandboxRequest{Spec: &sandboxv1.SandboxSpec{Driver: "local"}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetSandbox().GetSandboxId(), resp.GetSandbox().GetRootDirectory()
	}
	run := func(id, cmd string) (int32, string) {
		t.Helper()
		resp, err := client.Exec(t.Context(), &sandboxv1.ExecRequest{SandboxId: id, Spec: &sandboxv1.ExecSpec{Command: cmd}})
		if err != nil {
			t.Fatalf("Exec(%q): %v", cmd, err)
		}
		return resp.GetResult().GetExitCode(), string(resp.GetResult().GetStdout()) + string(resp.GetResult().GetStderr())
	}
	planter, _ := create()
	attacker, _ := create()
	suid := filepath.Join(t.TempDir(), "suidbash")
	os.Chmod(filepath.Dir(suid), 0o777)
	t.Cleanup(func() { os.Remove(suid) })
	if code, out := run(planter, "cp /bin/bash "+suid+" && chmod 6755 "+suid); code != 0 {
		t.Fatalf("the plant failed: %s", out)
	}
	if _, err := client.DeleteSandbox(t.Context(), &sandboxv1.DeleteSandboxRequest{SandboxId: planter}); err != nil {
		t.Fatal(err)
	}
	victim, victimDir := create()
	if code, out := run(victim, "echo "+canary+" > secret && chmod 600 secret"); code != 0 {
		t.Fatal(out)
	}
	// The plant: a setuid binary of the victim's uid now.
	fi, err := os.Stat(suid)
	if err != nil {
		t.Fatalf("the plant is gone: %v", err)
	}
	vi, err := os.Stat(victimDir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSetuid == 0 || fi.Sys().(*syscall.Stat_t).Uid != vi.Sys().(*syscall.Stat_t).Uid {
		t.Fatalf("the plant is not a setuid binary of the victim's uid %d: %v uid %d", vi.Sys().(*syscall.Stat_t).Uid, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid)
	}
	code, out := run(attacker, suid+" -p -c 'id -u; cat "+victimDir+"/secret'")
	if strings.Contains(out, canary) || strings.Contains(out, fmt.Sprint(vi.Sys().(*syscall.Stat_t).Uid)) {
		t.Errorf("another sandbox became the victim's uid through the planted setuid binary: exit %d, %q", code, out)
	}
}

// TestBwrapUIDsOverlap: a -sandbox-uids range sharing a uid with the bwrap
// plugin's sandbox uids is refused at start, saying which ranges clash; one
// outside it starts.
func TestBwrapUIDsOverlap(t *testing.T) {
	plug := []sandbox.PluginConfig{{Name: "bwrap", Path: "/nonexistent/fabro-sandbox-bwrap", SHA256: strings.Repeat("0", 64)}}
	for _, tt := range []struct {
		uids    string
		refused bool
	}{
		{"1610000000-1610000999", false},
		{fmt.Sprintf("%d-%d", bwrap.DefaultUIDBase-10, bwrap.DefaultUIDBase), true},
		{fmt.Sprintf("%d-%d", bwrap.DefaultUIDBase+5, bwrap.DefaultUIDBase+10), true},
		{fmt.Sprintf("%d-%d", bwrap.DefaultUIDBase+bwrap.DefaultUIDCount-1, bwrap.DefaultUIDBase+bwrap.DefaultUIDCount+10), true},
		{fmt.Sprintf("%d-%d", bwrap.DefaultUIDBase+bwrap.DefaultUIDCount, bwrap.DefaultUIDBase+bwrap.DefaultUIDCount+10), false},
	} {
		uids, err := local.ParseUIDs(tt.uids)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := sandbox.New(sandbox.Config{Plugins: plug, Security: sandbox.Security{UIDs: uids}}, slog.New(slog.DiscardHandler))
		if svc != nil {
			svc.Close(t.Context())
		}
		switch {
		case tt.refused && (err == nil || !strings.Contains(err.Error(), "overlaps the bwrap plugin's sandbox uids")):
			t.Errorf("-sandbox-uids %s: %v; want it refused as overlapping the bwrap uids", tt.uids, err)
		case !tt.refused && err != nil:
			t.Errorf("-sandbox-uids %s: %v; want it accepted", tt.uids, err)
		}
	}
}
