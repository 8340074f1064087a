package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set at build time with -ldflags "-X main.version=v1.2.3 -X
// main.commit=<sha> -X main.date=<RFC 3339>"; empty ones come from the
// binary's build information (the module version and the VCS stamp).
var (
	version string
	commit  string
	date    string
)

// buildInfo is what `fabro --version` prints.
type buildInfo struct {
	version, commit, date, dateKind, goVersion string
}

func currentBuild() buildInfo {
	info, ok := debug.ReadBuildInfo()
	return describeBuild(version, commit, date, info, ok)
}

// describeBuild prefers the -ldflags values, then the build information.
func describeBuild(version, commit, date string, info *debug.BuildInfo, ok bool) buildInfo {
	b := buildInfo{version: version, commit: commit, date: date, dateKind: "built", goVersion: runtime.Version()}
	if ok {
		if b.version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.version = info.Main.Version
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if b.commit == "" && settings["vcs.revision"] != "" {
			b.commit = settings["vcs.revision"]
			if settings["vcs.modified"] == "true" {
				b.commit += " (modified)"
			}
		}
		if b.date == "" && settings["vcs.time"] != "" {
			b.date, b.dateKind = settings["vcs.time"], "committed"
		}
	}
	if b.version == "" {
		b.version = "dev"
	}
	if b.commit == "" {
		b.commit = "unknown (built without -ldflags or VCS stamping)"
	}
	if b.date == "" {
		b.date = "unknown"
	}
	return b
}

func versionText() string { return currentBuild().String() }

func (b buildInfo) String() string {
	var s strings.Builder
	fmt.Fprintf(&s, "fabro %s\n", b.version)
	fmt.Fprintf(&s, "commit:  %s\n", b.commit)
	fmt.Fprintf(&s, "%-8s %s\n", b.dateKind+":", b.date)
	fmt.Fprintf(&s, "go:      %s %s/%s\n", b.goVersion, runtime.GOOS, runtime.GOARCH)
	return s.String()
}

func versionCommand() *command {
	return &command{
		name: "version", summary: "print the version, commit and build date (as fabro --version)",
		long: `Prints the version, the commit and the build date set at build time
(-ldflags "-X main.version=... -X main.commit=... -X main.date=..."), or else
the module version and the commit and commit time Go stamps into a binary
built from a checkout.`,
		examples: "  fabro --version\n  fabro version",
		define: func(fs *flag.FlagSet, e env) runner {
			return func(_ context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("version takes no arguments")
				}
				fmt.Fprint(e.stdout, versionText())
				return nil
			}
		},
	}
}
