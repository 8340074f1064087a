package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/drivertest"
	"github.com/fabro-sh/fabro-go/sdk/sandbox/plugin/plugintest"
)

// sandboxCommand is `fabro sandbox conformance`.
func sandboxCommand() *command {
	return &command{
		name: "sandbox", summary: "check sandbox driver plugins; list and follow a sandbox's processes; pause and resume it",
		examples: "  fabro sandbox conformance ./fabro-sandbox-mine\n  fabro sandbox ps sbx-0123abcd\n  fabro sandbox logs -f sbx-0123abcd web\n  fabro sandbox pause sbx-0123abcd",
		subs: append(append(sandboxProcessCommands(), sandboxPauseCommands()...), &command{
			name: "conformance", args: "PLUGIN", summary: "run the driver contract suite against a plugin binary",
			long: `Runs the sandbox driver contract suite (the one the built-in drivers pass)
against a plugin binary, through the host code the sandbox service uses,
and prints which parts passed, failed, or were skipped because of the
plugin's stated capabilities. Exit 1 when any part failed.`,
			examples: "  fabro sandbox conformance ./fabro-sandbox-firecracker\n  fabro sandbox conformance -v --run 'Exec/.*' --plugin-env TOKEN=x ./fabro-sandbox-mine",
			define:   conformance,
		}),
	}
}

// errNonConformant is a conformance run with failures; they are printed.
var errNonConformant = errors.New("the plugin does not conform")

// envList is a repeated KEY=VALUE flag.
type envList []string

func (l *envList) String() string { return strings.Join(*l, ",") }
func (l *envList) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	*l = append(*l, v)
	return nil
}

// conformance runs the drivertest suite against a plugin binary, through
// the host code the sandbox service uses, and prints which parts passed,
// failed, or were skipped because of the plugin's stated capabilities.
func conformance(fs *flag.FlagSet, e env) runner {
	var (
		verbose bool
		run     string
		penv    envList
	)
	fs.BoolVar(&verbose, "v", false, "print the suite's whole output, as go test -v")
	fs.StringVar(&run, "run", "", "run only the parts matching this regular expression (as go test -run)")
	fs.Var(&penv, "plugin-env", "KEY=VALUE in the plugin's environment (repeatable); it inherits nothing else")
	return func(_ context.Context, args []string) error {
		if len(args) != 1 {
			return usagef("conformance takes one plugin binary, got %q", args)
		}
		return runConformance(args[0], penv, run, verbose, e)
	}
}

func runConformance(path string, penv envList, run string, verbose bool, e env) error {
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		return fmt.Errorf("plugin binary %s: not a file (%v)", path, err)
	}
	code, report := runSuite(path, penv, run, verbose, e.stdout)
	fmt.Fprint(e.stdout, report)
	if code != 0 {
		return errNonConformant
	}
	return nil
}

// suiteMu serialises suite runs: the testing package's state is global.
var suiteMu sync.Mutex

// runSuite runs the suite with the testing package outside `go test`, and
// returns its exit code and a summary.
func runSuite(path string, env []string, run string, verbose bool, out io.Writer) (int, string) {
	suiteMu.Lock()
	defer suiteMu.Unlock()
	tests := []testing.InternalTest{{Name: "Conformance", F: func(t *testing.T) {
		drivertest.Run(t, plugintest.NewDriver(path, env...))
	}}}
	args := []string{os.Args[0], "-test.v", "-test.count=1", "-test.timeout=20m"}
	if run != "" {
		args = append(args, "-test.run", "^Conformance$/"+run)
	}
	savedArgs, savedStdout := os.Args, os.Stdout
	r, w, err := os.Pipe()
	if err != nil {
		return 1, err.Error() + "\n"
	}
	os.Args, os.Stdout = args, w
	sum := newSummary()
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if verbose {
				fmt.Fprintln(out, sc.Text())
			}
			sum.line(sc.Text())
		}
	}()
	m := testing.MainStart(suiteDeps{}, tests, nil, nil, nil)
	code := m.Run()
	os.Args, os.Stdout = savedArgs, savedStdout
	w.Close()
	<-done
	r.Close()
	return code, sum.String()
}

// summary reads go test -v output and keeps each test's end and the last
// line it logged (a skip's reason).
type summary struct {
	current string
	last    map[string]string
	results []result
}

type result struct{ verdict, name, reason string }

var (
	runLine  = regexp.MustCompile(`^=== (?:RUN|CONT|NAME|PAUSE)\s+(\S+)`)
	endLine  = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	fileLine = regexp.MustCompile(`^\s+\S+\.go:\d+: (.*)$`)
)

func newSummary() *summary { return &summary{last: map[string]string{}} }

func (s *summary) line(l string) {
	if m := runLine.FindStringSubmatch(l); m != nil {
		s.current = m[1]
		return
	}
	if m := endLine.FindStringSubmatch(l); m != nil {
		s.results = append(s.results, result{verdict: m[1], name: m[2], reason: s.last[m[2]]})
		return
	}
	if m := fileLine.FindStringSubmatch(l); m != nil && s.current != "" {
		s.last[s.current] = m[1]
	}
}

func (s *summary) String() string {
	var b strings.Builder
	count := map[string]int{}
	var parts, skips, fails []result
	for _, r := range s.results {
		count[r.verdict]++
		name := strings.TrimPrefix(r.name, "Conformance/")
		switch {
		case r.name == "Conformance":
			continue
		case !strings.Contains(name, "/"):
			parts = append(parts, result{r.verdict, name, r.reason})
		}
		switch r.verdict {
		case "SKIP":
			skips = append(skips, result{r.verdict, name, r.reason})
		case "FAIL":
			fails = append(fails, result{r.verdict, name, r.reason})
		}
	}
	slices.SortFunc(parts, func(a, b result) int { return strings.Compare(a.name, b.name) })
	fmt.Fprintf(&b, "\nconformance: %d passed, %d failed, %d skipped\n", count["PASS"], count["FAIL"], count["SKIP"])
	for _, p := range parts {
		fmt.Fprintf(&b, "  %-4s %s\n", p.verdict, p.name)
	}
	if len(skips) > 0 {
		fmt.Fprintln(&b, "skipped, because of the plugin's stated capabilities or its sandbox:")
		for _, r := range skips {
			fmt.Fprintf(&b, "  %s: %s\n", r.name, r.reason)
		}
	}
	if len(fails) > 0 {
		fmt.Fprintln(&b, "failed (run with -v for the details):")
		for _, r := range fails {
			fmt.Fprintf(&b, "  %s: %s\n", r.name, r.reason)
		}
	}
	return b.String()
}

// suiteDeps is what the testing package needs to run tests outside the
// go test driver: name matching, and nothing of profiles, coverage or
// fuzzing.
type suiteDeps struct{}

func (suiteDeps) ImportPath() string                          { return "fabro/sandbox/conformance" }
func (suiteDeps) ModulePath() string                          { return "" }
func (suiteDeps) MatchString(pat, str string) (bool, error)   { return regexp.MatchString(pat, str) }
func (suiteDeps) SetPanicOnExit0(bool)                        {}
func (suiteDeps) StartCPUProfile(io.Writer) error             { return errors.New("no profiles") }
func (suiteDeps) StopCPUProfile()                             {}
func (suiteDeps) StartTestLog(io.Writer)                      {}
func (suiteDeps) StopTestLog() error                          { return nil }
func (suiteDeps) WriteProfileTo(string, io.Writer, int) error { return errors.New("no profiles") }
func (suiteDeps) CoordinateFuzzing(time.Duration, int64, time.Duration, int64, int, []corpusEntry, []reflect.Type, string, string) error {
	return errors.New("no fuzzing")
}
func (suiteDeps) RunFuzzWorker(func(corpusEntry) error) error { return errors.New("no fuzzing") }
func (suiteDeps) ReadCorpus(string, []reflect.Type) ([]corpusEntry, error) {
	return nil, errors.New("no fuzzing")
}
func (suiteDeps) CheckCorpus([]any, []reflect.Type) error { return nil }
func (suiteDeps) ResetCoverage()                          {}
func (suiteDeps) SnapshotCoverage()                       {}
func (suiteDeps) InitRuntimeCoverage() (string, func(string, string) (string, error), func() float64) {
	return "", nil, nil
}

// corpusEntry is the testing package's fuzzing corpus entry (an alias of
// this struct there).
type corpusEntry = struct {
	Parent     string
	Path       string
	Data       []byte
	Values     []any
	Generation int
	IsSeed     bool
}
