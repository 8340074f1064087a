package sandbox

import (
	"context"
	"flag"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/fabro-sh/fabro-go/platform/auth"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
)

// Security confines what sandboxes can reach on the host.
type Security struct {
	// AllowedRoots are the host directories a sandbox's working directory
	// may be (or lie under), besides the managed workspaces, which are
	// always allowed. Whatever the list, the data directory, anything
	// above it and anything inside it but the workspaces are refused.
	AllowedRoots []string
	// User is who the local driver runs commands as when the service runs
	// as root (see local.Config.User): default "fabro-sandbox" when that
	// user exists, else "nobody"; "root" keeps root.
	User string
	// UIDs, when set, gives each managed local and docker sandbox a host
	// uid of its own from the range (see local.UIDs), when the service
	// runs as root.
	UIDs *local.UIDs
	// DiskDefault is the disk limit of a sandbox whose spec sets none, on
	// drivers that enforce one and for managed workspaces (a directory of
	// the caller's cannot be bounded); 0: none.
	DiskDefault int64
	// DiskMax is the largest disk limit a spec may ask for; 0: no maximum.
	DiskMax int64
	// Protect are further directories no sandbox may be rooted in, at or
	// above, like the data directory: those of the services sharing this
	// process (fabro serve's and fabro exec's vault).
	Protect []string
}

// RegisterFlags binds -sandbox-allowed-roots and -sandbox-user to c.
func (c *Security) RegisterFlags(fs *flag.FlagSet) {
	fs.Func("sandbox-allowed-roots", "comma-separated host directories sandboxes may be rooted in, besides the managed workspaces", func(v string) error {
		for r := range strings.SplitSeq(v, ",") {
			if r = strings.TrimSpace(r); r != "" {
				if !filepath.IsAbs(r) {
					return fmt.Errorf("%q is not an absolute path", r)
				}
				c.AllowedRoots = append(c.AllowedRoots, r)
			}
		}
		return nil
	})
	fs.Func("sandbox-uids", "FIRST-LAST: a host uid range that is no one's; when the service runs as root, each managed local and docker sandbox gets a uid of its own from it (FIRST is their shared group), so that no sandbox can read another's workspace (one range per service)", func(v string) error {
		u, err := local.ParseUIDs(v)
		c.UIDs = u
		return err
	})
	fs.Func("sandbox-disk-default", "disk limit (bytes, or with K, M, G or T: 512M, 10G) of a sandbox whose spec sets none, where the driver enforces one (local, bwrap and docker on a root service; daytona) on a managed workspace; default none", func(v string) error {
		n, err := parseSize(v)
		c.DiskDefault = n
		return err
	})
	fs.Func("sandbox-disk-max", "largest disk limit a sandbox spec may ask for (bytes, or with K, M, G or T); default no maximum", func(v string) error {
		n, err := parseSize(v)
		c.DiskMax = n
		return err
	})
	fs.StringVar(&c.User, "sandbox-user", c.User, "user the local driver runs commands as when the service runs as root (default fabro-sandbox if it exists, else nobody; \"root\": no change)")
}

// parseSize reads a byte count with an optional binary suffix: 512M is
// 512 MiB.
func parseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	mult := int64(1)
	if v != "" {
		switch strings.ToUpper(v[len(v)-1:]) {
		case "K":
			mult = 1 << 10
		case "M":
			mult = 1 << 20
		case "G":
			mult = 1 << 30
		case "T":
			mult = 1 << 40
		}
		if mult > 1 {
			v = v[:len(v)-1]
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size (a byte count, or with K, M, G or T)", v)
	}
	return n * mult, nil
}

// rootPolicy decides which host directories a sandbox may be rooted in.
type rootPolicy struct {
	allowed    []string // canonical; the root itself or anything under it
	workspaces string   // canonical; strictly under it
	protected  []string // canonical data directories
}

func newRootPolicy(cfg Config, workspaces string) rootPolicy {
	p := rootPolicy{workspaces: canonical(workspaces)}
	for _, r := range cfg.Security.AllowedRoots {
		p.allowed = append(p.allowed, canonical(r))
	}
	if cfg.DataDir != "" {
		p.protected = append(p.protected, canonical(cfg.DataDir))
	}
	for _, d := range cfg.Security.Protect {
		if d != "" {
			p.protected = append(p.protected, canonical(d))
		}
	}
	return p
}

// canonical is path made absolute, clean and, as far as it exists, free of
// symbolic links.
func canonical(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real
	}
	return abs
}

// within reports whether path is dir or lies under it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// check refuses a working directory outside the allowed roots, or one
// that is, holds or lies in the data directory (but for its workspaces).
// Both the path as given and the one its links lead to must pass.
func (p rootPolicy) check(d driver.Driver, dir string) error {
	if iso := d.Capabilities().Isolation; iso == driver.IsolationVM || iso == driver.IsolationContainer {
		// A path inside a container or on a machine of the sandbox's own
		// rather than on this host (a container's host directory is
		// host_dir, checked by checkHostDir).
		return nil
	}
	// On this host, as a mounted host directory is checked; "" (managed)
	// and a relative path (refused by the driver) pass.
	return p.checkHostDir(dir)
}

// checkHostDir checks a host directory a driver mounts (docker's
// host_dir) as check does a working directory: a relative one is left to
// the driver, which refuses it.
func (p rootPolicy) checkHostDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return nil
	}
	for _, path := range []string{filepath.Clean(dir), canonical(dir)} {
		if err := p.checkPath(dir, path); err != nil {
			return err
		}
	}
	return nil
}

func (p rootPolicy) checkPath(given, path string) error {
	inWorkspaces := p.inWorkspaces(path)
	for _, data := range p.protected {
		if within(data, path) || (within(path, data) && !inWorkspaces) {
			return domain.New(codes.PermissionDenied, "ROOT_NOT_ALLOWED", fmt.Sprintf("working_directory %s is, holds or lies in the service's data directory: sandboxes may not reach it", given))
		}
	}
	if inWorkspaces {
		return nil
	}
	for _, r := range p.allowed {
		if within(path, r) {
			return nil
		}
	}
	return domain.New(codes.PermissionDenied, "ROOT_NOT_ALLOWED", fmt.Sprintf("working_directory %s is outside the directories this service allows sandboxes in (the operator lists them with -sandbox-allowed-roots)", given))
}

// checkCreated checks the root a driver actually opened: the path was
// checked before the driver resolved it again, and a link swapped in
// between must not redirect the sandbox. Managed workspaces and sandboxes
// not on this host are the driver's own, as is a root the caller did not
// name (given is the spec's working_directory).
func (p rootPolicy) checkCreated(given string, info driver.Info) error {
	iso := info.Capabilities.Isolation
	if given == "" || info.ManagedWorkspace || iso == driver.IsolationVM || iso == driver.IsolationContainer || !filepath.IsAbs(info.RootDirectory) {
		return nil
	}
	return p.checkPath(info.RootDirectory, canonical(info.RootDirectory))
}

// inWorkspaces reports whether path lies strictly under the managed
// workspaces.
func (p rootPolicy) inWorkspaces(path string) bool {
	return p.workspaces != "" && path != p.workspaces && within(path, p.workspaces)
}

// checkWorkspaceOwner refuses a directory (a working directory or a
// mounted host directory) inside the managed workspaces unless it lies in
// the managed workspace of a sandbox the caller reaches: the policy lets
// such paths through, but each is some sandbox's, and another person's
// workspace is theirs. A path in no sandbox's workspace gets the same
// refusal, so the answer says nothing of whether a path is in use.
func (s *Service) checkWorkspaceOwner(ctx context.Context, given string) error {
	if !filepath.IsAbs(given) {
		return nil
	}
	for _, path := range []string{filepath.Clean(given), canonical(given)} {
		if !s.roots.inWorkspaces(path) {
			continue
		}
		owner, found := s.workspaceOwner(path)
		reach := auth.Reaches(ctx, owner)
		if !found || reach == auth.Unreachable {
			return domain.New(codes.PermissionDenied, "ROOT_NOT_ALLOWED", fmt.Sprintf("working_directory %s lies in the managed workspaces, in none of your sandboxes' workspaces", given))
		}
		if reach == auth.AsAdmin {
			auth.Audit(ctx, s.logger, "workspace", given, owner)
		}
	}
	return nil
}

// workspaceOwner is the owner of the sandbox whose managed workspace holds
// path.
func (s *Service) workspaceOwner(path string) (owner string, found bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.sandboxes {
		if !e.info.ManagedWorkspace || e.info.RootDirectory == "" {
			continue
		}
		if root := canonical(e.info.RootDirectory); within(path, root) && s.roots.inWorkspaces(root) {
			return e.owner, true
		}
	}
	return "", false
}
