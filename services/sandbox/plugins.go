package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin"
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
func ReadPluginDir(dir string) ([]PluginConfig, error) {
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
		if p.SHA256 == "" {
			drivers = append(drivers, refusedPlugin(p, logger))
			continue
		}
		d := plugin.New(plugin.Config{Name: p.Name, Path: p.Path, Args: p.Args, Env: p.Env, SHA256: p.SHA256, Logger: logger, HealthInterval: p.HealthInterval})
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
