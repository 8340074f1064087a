package sandbox

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/bwrap"
	"github.com/fabro-sh/fabro-go/services/sandbox/driver/local"
	"github.com/fabro-sh/fabro-go/services/sandbox/internal/diskimage"
)

// PluginConfig names one out-of-process driver plugin.
type PluginConfig struct {
	// Name is the driver's name in sandbox specs.
	Name string `json:"name"`
	// Path is the plugin binary.
	Path string `json:"path"`
	// SHA256 is the binary's checksum in hex; required. A binary that
	// differs is refused, and the driver listed unavailable saying so.
	SHA256 string `json:"sha256"`
	// Args and Env are the plugin's arguments and whole environment (it
	// does not inherit the service's).
	Args []string `json:"args,omitempty"`
	Env  []string `json:"env,omitempty"`
	// HealthInterval is how often the running plugin is health-checked;
	// default 10s.
	HealthInterval time.Duration `json:"health_interval,omitempty"`
}

// pluginPrefix names plugin binaries in a plugin directory:
// fabro-sandbox-NAME serves the driver NAME.
const pluginPrefix = "fabro-sandbox-"

// sumsFile in a plugin directory holds the binaries' checksums, as
// sha256sum writes them: "HEX  FILE" per line.
const sumsFile = "SHA256SUMS"

// ReadPluginDir lists the plugins of a directory: every executable named
// fabro-sandbox-NAME, with its checksum from the directory's SHA256SUMS. A
// binary SHA256SUMS does not name is still listed, with no checksum, so
// that it shows as unavailable rather than vanishing.
//
// SHA256SUMS vouches for binaries beside it, so whoever can write the
// directory can replace both: the directory, its parents and SHA256SUMS
// must be owned by root or this service's user and writable by no one else
// (a parent may be a sticky directory such as /tmp), as ssh demands of its
// keys.
func ReadPluginDir(dir string) ([]PluginConfig, error) {
	if err := checkTrusted(dir); err != nil {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	if err := checkWritableByOwnerOnly(filepath.Join(dir, sumsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	sums := map[string]string{}
	if f, err := os.Open(filepath.Join(dir, sumsFile)); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			sum, file, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
			if ok {
				sums[strings.TrimPrefix(strings.TrimSpace(file), "*")] = sum
			}
		}
		f.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("plugin directory: %w", err)
	}
	var out []PluginConfig
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), pluginPrefix)
		if !ok || name == "" || e.IsDir() {
			continue
		}
		if err := checkWritableByOwnerOnly(filepath.Join(dir, e.Name())); err != nil {
			return nil, fmt.Errorf("plugin directory: %w", err)
		}
		out = append(out, PluginConfig{Name: name, Path: filepath.Join(dir, e.Name()), SHA256: sums[e.Name()]})
	}
	return out, nil
}

// pluginDrivers makes a driver of each configured plugin. Nothing starts
// yet: a plugin starts when first needed. A plugin with no checksum is
// never started: it is listed unavailable, saying so.
func pluginDrivers(cfg Config, logger *slog.Logger) ([]driver.Driver, []*plugin.Driver, error) {
	list := cfg.Plugins
	if cfg.PluginDir != "" {
		more, err := ReadPluginDir(cfg.PluginDir)
		if err != nil {
			return nil, nil, fmt.Errorf("sandbox: %w", err)
		}
		list = append(append([]PluginConfig(nil), list...), more...)
	}
	var drivers []driver.Driver
	var plugins []*plugin.Driver
	for _, p := range list {
		if p.Name == "" || p.Path == "" {
			return nil, nil, fmt.Errorf("sandbox: plugin %+v needs a name and a path", p)
		}
		if err := checkBwrapUIDs(p, cfg.Security.UIDs); err != nil {
			return nil, nil, err
		}
		if p.SHA256 == "" {
			drivers = append(drivers, refusedPlugin(p, logger))
			continue
		}
		env := p.Env
		if p.Name == bwrap.Name && cfg.DataDir != "" {
			// Its workspaces in a directory of this instance's, which the
			// service sweeps at start (sweepBwrap).
			env = append(slices.Clone(env), bwrap.InstanceEnv+"="+instanceID(cfg.DataDir))
		}
		d := plugin.New(plugin.Config{Name: p.Name, Path: p.Path, Args: p.Args, Env: env, SHA256: p.SHA256, Logger: logger, HealthInterval: p.HealthInterval})
		drivers, plugins = append(drivers, d), append(plugins, d)
	}
	return drivers, plugins, nil
}

// refused is a plugin that is never started; every use says why.
type refused struct {
	name string
	err  error
}

func refusedPlugin(p PluginConfig, logger *slog.Logger) *refused {
	sum, err := plugin.FileSHA256(p.Path)
	if err != nil {
		sum = "unknown (" + err.Error() + ")"
	}
	logger.Error("sandbox plugin refused: no checksum configured", "plugin", p.Name, "path", p.Path, "binary_sha256", sum)
	return &refused{name: p.Name, err: fmt.Errorf("%w: plugin %q: no sha256 configured for %s (the binary has %s); refused", driver.ErrUnavailable, p.Name, p.Path, sum)}
}

func (r *refused) Name() string                                                { return r.name }
func (r *refused) Capabilities() driver.Capabilities                           { return driver.Capabilities{} }
func (r *refused) Available(context.Context) error                             { return r.err }
func (r *refused) Create(context.Context, driver.Spec) (driver.Sandbox, error) { return nil, r.err }

// checkGone reports whether a sandbox's driver can tell that its backing is
// gone (a plugin that exited, a container removed), and why.
func checkGone(sb driver.Sandbox) (reason string, gone bool) {
	c, ok := sb.(driver.Checker)
	if !ok {
		return "", false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Check(ctx); errors.Is(err, driver.ErrGone) {
		return err.Error(), true
	}
	return "", false
}

// checkTrusted checks dir and every directory above it as ReadPluginDir
// requires.
func checkTrusted(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	if err := checkWritableByOwnerOnly(real); err != nil {
		return err
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		// A sticky directory lets no one rename or remove another's entry.
		if fi.Mode()&os.ModeSticky == 0 {
			if err := checkWritableByOwnerOnly(p); err != nil {
				return err
			}
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

// checkWritableByOwnerOnly refuses a file that its group or others may
// write, or whose owner is neither root nor this process's user.
func checkWritableByOwnerOnly(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is writable by its group or others (mode %v): anyone who can write it can replace a plugin and its checksum", path, fi.Mode().Perm())
	}
	if uid, ok := ownerOf(fi); ok && uid != 0 && uid != os.Getuid() {
		return fmt.Errorf("%s is owned by uid %d, neither root nor this service's user", path, uid)
	}
	return nil
}

// checkBwrapUIDs refuses a -sandbox-uids range that shares a uid with the
// bwrap plugin's own sandbox uids: a local or docker sandbox could then be
// given the uid a bwrap sandbox owns its workspace with, and read it.
func checkBwrapUIDs(p PluginConfig, u *local.UIDs) error {
	if p.Name != bwrap.Name || u == nil {
		return nil
	}
	first, last := uint64(bwrap.DefaultUIDBase), uint64(bwrap.DefaultUIDBase)+uint64(bwrap.DefaultUIDCount)-1
	if a, b := u.Bounds(); uint64(a) <= last && uint64(b) >= first {
		return fmt.Errorf("sandbox: -sandbox-uids %d-%d overlaps the bwrap plugin's sandbox uids %d-%d: a local or docker sandbox could get a bwrap sandbox's uid and read its workspace; choose a range outside it (below %d, say)",
			a, b, first, last, first)
	}
	return nil
}

// instanceID names a service instance by its data directory, for the
// bwrap plugin's workspace root.
func instanceID(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return hex.EncodeToString(sum[:8])
}

// sweepBwrap removes the bwrap workspaces of this instance's dead
// sandboxes: those in its directory (bwrap.InstanceRoot, root's, which
// only the plugin writes) that no record names, with their disk images.
// Entries are never followed: a link, or anything but a directory named
// like a workspace or its image, is left alone.
func (s *Service) sweepBwrap(ctx context.Context, instance string, live map[string]bool) {
	root := bwrap.InstanceRoot(instance)
	fi, err := os.Lstat(root)
	if err != nil {
		return
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || !fi.IsDir() || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		s.logger.WarnContext(ctx, "bwrap workspaces not swept: their directory is not root's alone", "dir", root)
		return
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, de := range ents {
		if !strings.HasPrefix(de.Name(), "sandbox-") {
			continue
		}
		p := filepath.Join(root, de.Name())
		if ws, ok := strings.CutSuffix(p, diskimage.Suffix); ok {
			if de.Type().IsRegular() && !live[ws] {
				if _, err := os.Lstat(ws); errors.Is(err, os.ErrNotExist) {
					os.Remove(p) // an image whose workspace is gone
				}
			}
			continue
		}
		if !de.IsDir() || live[p] { // de's type is the entry's own: a link is no directory
			continue
		}
		err := diskimage.Detach(p)
		if err == nil {
			err = os.RemoveAll(p)
		}
		if err != nil {
			s.logger.WarnContext(ctx, "orphaned bwrap workspace not removed", "workspace", p, "error", err)
		} else {
			s.logger.InfoContext(ctx, "orphaned bwrap workspace removed", "workspace", p)
		}
	}
}
