package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/fabro-sh/fabro-go/platform/envflag"
)

// configKeys are the config file's keys and the flags they set a default
// for. A key applies to every command that has its flag.
var configKeys = []struct{ key, flag string }{
	{"server", "server"},
	{"token_file", "token-file"},
	{"model", "model"},
	{"sandbox", "sandbox"},
	{"permissions", "permissions"},
}

// fileConfig is the config file: every key optional, no other key allowed.
type fileConfig struct {
	Server      *string `toml:"server"`
	TokenFile   *string `toml:"token_file"`
	Model       *string `toml:"model"`
	Sandbox     *string `toml:"sandbox"`
	Permissions *string `toml:"permissions"`
	// Profiles are named sections, [profile.NAME], of the same keys;
	// --profile NAME applies one over the top level.
	Profiles map[string]*fileConfig `toml:"profile"`
}

func (f *fileConfig) values() map[string]*string {
	return map[string]*string{"server": f.Server, "token_file": f.TokenFile, "model": f.Model, "sandbox": f.Sandbox, "permissions": f.Permissions}
}

// readsConfig says whether a command has a flag the config file sets.
func readsConfig(fs *flag.FlagSet) bool {
	for _, k := range configKeys {
		if fs.Lookup(k.flag) != nil {
			return true
		}
	}
	return false
}

func envName(flagName string) string { return envflag.EnvName("FABRO", flagName) }

// defaultConfigFile is $XDG_CONFIG_HOME/fabro/config.toml, else
// ~/.config/fabro/config.toml.
func defaultConfigFile(lookupEnv func(string) (string, bool)) string {
	if d, ok := lookupEnv("XDG_CONFIG_HOME"); ok && d != "" {
		return filepath.Join(d, "fabro", "config.toml")
	}
	if h := homeDir(lookupEnv); h != "" {
		return filepath.Join(h, ".config", "fabro", "config.toml")
	}
	return ""
}

func homeDir(lookupEnv func(string) (string, bool)) string {
	if h, ok := lookupEnv("HOME"); ok && h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

// applyDefaults fills every flag not given on the command line: from its
// environment variable (FABRO_<NAME>), else from the config file. The
// order is flag, environment, file, built-in default.
func applyDefaults(fs *flag.FlagSet, e env) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		name := envName(f.Name)
		if v, ok := e.lookupEnv(name); ok {
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("environment variable %s (flag --%s): %w", name, f.Name, serr)
			}
			set[f.Name] = true
		}
	})
	if err != nil || fs.Lookup("config") == nil {
		return err
	}
	path, explicit := fs.Lookup("config").Value.String(), true
	if path == "" {
		path, explicit = defaultConfigFile(e.lookupEnv), false
	}
	profile := ""
	if pf := fs.Lookup("profile"); pf != nil {
		profile = pf.Value.String()
	}
	if path == "" && profile != "" {
		return fmt.Errorf("--profile %q: no config file (set $HOME, $XDG_CONFIG_HOME or --config)", profile)
	}
	if path == "" {
		return nil
	}
	cfg, err := readConfig(path, explicit)
	if err == nil && cfg == nil && profile != "" {
		return fmt.Errorf("--profile %q: no config file %s", profile, path)
	}
	if err != nil || cfg == nil {
		return err
	}
	values := cfg.values()
	if profile != "" {
		name := profile
		p := cfg.Profiles[name]
		if p == nil {
			return fmt.Errorf("--profile %q: %s has no [profile.%s] section", name, path, name)
		}
		if len(p.Profiles) > 0 {
			return fmt.Errorf("%s: [profile.%s] may not hold profiles of its own", path, name)
		}
		for k, v := range p.values() {
			if v != nil {
				values[k] = v
			}
		}
	}
	for _, k := range configKeys {
		v := values[k.key]
		if v == nil || set[k.flag] || fs.Lookup(k.flag) == nil {
			continue
		}
		val := *v
		if k.key == "token_file" {
			val = expandHome(val, e.lookupEnv)
		}
		if err := fs.Set(k.flag, val); err != nil {
			return fmt.Errorf("%s: %s: %w", path, k.key, err)
		}
	}
	return nil
}

// readConfig reads the config file; a missing default file is no config,
// a missing file named by --config or $FABRO_CONFIG an error.
func readConfig(path string, explicit bool) (*fileConfig, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	var cfg fileConfig
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		var strict *toml.StrictMissingError
		var de *toml.DecodeError
		switch {
		case errors.As(err, &strict) && len(strict.Errors) > 0:
			first := strict.Errors[0]
			row, _ := first.Position()
			return nil, fmt.Errorf("%s:%d: unknown key %q (known: %s)", path, row, strings.Join(first.Key(), "."), knownKeys())
		case errors.As(err, &de):
			row, _ := de.Position()
			return nil, fmt.Errorf("%s:%d: %s", path, row, de.Error())
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &cfg, nil
}

func knownKeys() string {
	var keys []string
	for _, k := range configKeys {
		keys = append(keys, k.key)
	}
	return strings.Join(keys, ", ")
}

func expandHome(p string, lookupEnv func(string) (string, bool)) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		if h := homeDir(lookupEnv); h != "" {
			return filepath.Join(h, rest)
		}
	}
	return p
}
