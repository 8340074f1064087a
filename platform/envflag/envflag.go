// Package envflag fills flags that were not given on the command line from
// environment variables, so every binary reads configuration the same way:
// a flag beats its environment variable, which beats the flag's default.
package envflag

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// EnvName returns the environment variable that backs the flag name:
// prefix "FABRO" and flag "data-dir" give "FABRO_DATA_DIR". An empty
// prefix gives just "DATA_DIR".
func EnvName(prefix, name string) string {
	n := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if prefix == "" {
		return n
	}
	return strings.TrimSuffix(prefix, "_") + "_" + n
}

// EnvNames lists the environment variable of every flag in fs, in the
// lexicographical order of the flag names, for usage output.
func EnvNames(fs *flag.FlagSet, prefix string) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, EnvName(prefix, f.Name)) })
	return names
}

// Parse parses args into fs; then every flag not set on the command line
// takes its value from the variable EnvName(prefix, flag) when lookupEnv
// reports it present (even if empty). A nil lookupEnv means os.LookupEnv.
// A value the flag rejects is an error naming the variable.
func Parse(fs *flag.FlagSet, args []string, prefix string, lookupEnv func(string) (string, bool)) error {
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		env := EnvName(prefix, f.Name)
		v, ok := lookupEnv(env)
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = fmt.Errorf("environment variable %s (flag -%s): %w", env, f.Name, serr)
		}
	})
	return err
}
