package mcptools

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
	"github.com/fabro-sh/fabro-go/services/agent/mcptest"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) {
	mcptest.MaybeServe()
	os.Exit(m.Run())
}

func stdioSpec(name string) *agentv1.McpServer {
	return &agentv1.McpServer{Name: name, Command: os.Args[0], Env: map[string]string{mcptest.ServeEnv: "1"}}
}

type warnings struct {
	mu  sync.Mutex
	msg []string
}

func (w *warnings) add(f *agentv1.ExtensionFailed) {
	w.mu.Lock()
	w.msg = append(w.msg, f.GetReason())
	w.mu.Unlock()
}

func start(t *testing.T, specs ...*agentv1.McpServer) (*tools.Set, *warnings) {
	t.Helper()
	w := &warnings{}
	var servers []Server
	for _, s := range specs {
		servers = append(servers, Server{Spec: s})
	}
	m, extras := Start(t.Context(), servers, w.add, testLogger(t))
	t.Cleanup(m.Close)
	return tools.NewSet("openai", tools.Full, tools.Env{Extra: extras}, nil), w
}

func testLogger(t *testing.T) *slogLogger { return newTestLogger(t) }

func TestTransports(t *testing.T) {
	hs := httptest.NewServer(mcptest.Handler())
	defer hs.Close()
	for _, spec := range []*agentv1.McpServer{stdioSpec("local"), {Name: "remote", Url: hs.URL}} {
		t.Run(spec.GetName(), func(t *testing.T) {
			set, w := start(t, spec)
			p := "mcp__" + spec.GetName() + "__"
			names := strings.Join(set.Names(), " ")
			for _, want := range []string{p + "echo", p + "image", p + "fail", p + "big", p + "crash"} {
				if !strings.Contains(names, want) {
					t.Errorf("tools %s lack %s", names, want)
				}
			}
			if strings.Contains(names, p+"bad") {
				t.Errorf("the tool with an invalid schema is offered")
			}
			if len(w.msg) != 1 || !strings.Contains(w.msg[0], `tool "bad" is left out`) {
				t.Errorf("warnings = %v", w.msg)
			}
			tests := []struct {
				tool, args string
				wantErr    bool
				want       string
				images     int
			}{
				{"echo", `{"text":"hello"}`, false, "hello", 0},
				{"image", `{}`, false, "a picture\n[image image/png, 24 bytes]", 1},
				{"fail", `{}`, true, "it went wrong", 0},
				{"echo", `{"text":5}`, true, "Tool argument validation failed", 0},
				{"echo", `{"nope":1}`, true, "Tool argument validation failed", 0},
			}
			for _, tc := range tests {
				r := set.Run(t.Context(), tools.Call{ID: "c", Name: p + tc.tool, Arguments: tc.args})
				if r.IsError != tc.wantErr || !strings.HasPrefix(r.Output, tc.want) || len(r.Images) != tc.images {
					t.Errorf("%s(%s) = %q (error %v, %d images), want %q (error %v, %d images)", tc.tool, tc.args, r.Output, r.IsError, len(r.Images), tc.want, tc.wantErr, tc.images)
				}
				if tc.images > 0 && !bytes.Equal(r.Images[0].Data, mcptest.PNG) {
					t.Errorf("image data %q", r.Images[0].Data)
				}
			}
			big := set.Run(t.Context(), tools.Call{ID: "c", Name: p + "big", Arguments: `{"chars":200000}`})
			if big.IsError || !big.Truncated || len(big.Output) > OutputLimit+500 {
				t.Errorf("big: truncated %v, %d chars", big.Truncated, len(big.Output))
			}
		})
	}
}

func TestCrashRestartsOnce(t *testing.T) {
	set, _ := start(t, stdioSpec("s"))
	run := func(tool string) tools.Result {
		args := `{"text":"x"}`
		if tool == "crash" {
			args = `{}`
		}
		return set.Run(t.Context(), tools.Call{ID: "c", Name: "mcp__s__" + tool, Arguments: args})
	}
	steps := []struct {
		tool, want string
		wantErr    bool
	}{
		{"echo", "x", false},
		{"crash", "and was restarted", true},
		{"echo", "x", false}, // the restarted server
		{"crash", "crashed again", true},
		{"echo", `The MCP server "s" is unavailable`, true},
	}
	for i, s := range steps {
		r := run(s.tool)
		if r.IsError != s.wantErr || !strings.Contains(r.Output, s.want) {
			t.Errorf("step %d %s = %q (error %v), want %q", i, s.tool, r.Output, r.IsError, s.want)
		}
	}
}

func TestServerThatDoesNotStart(t *testing.T) {
	set, w := start(t, &agentv1.McpServer{Name: "gone", Command: "/nonexistent/mcp-server"}, stdioSpec("ok"))
	if len(w.msg) == 0 || !strings.Contains(w.msg[0], `MCP server "gone" did not start`) {
		t.Errorf("warnings = %v", w.msg)
	}
	if r := set.Run(t.Context(), tools.Call{Name: "mcp__ok__echo", Arguments: `{"text":"still works"}`}); r.Output != "still works" {
		t.Errorf("the other server: %q", r.Output)
	}
}

// TestGuardedHTTP: a server dialled through the SSRF guard (one an API
// caller named) may not be on a private address.
func TestGuardedHTTP(t *testing.T) {
	hs := httptest.NewServer(mcptest.Handler())
	defer hs.Close()
	w := &warnings{}
	m, extras := Start(t.Context(), []Server{{Spec: &agentv1.McpServer{Name: "inside", Url: hs.URL}, HTTPClient: tools.PublicHTTPClient()}}, w.add, testLogger(t))
	defer m.Close()
	if len(extras) != 0 || len(w.msg) != 1 || !strings.Contains(w.msg[0], `MCP server "inside" did not start`) {
		t.Errorf("extras %d, warnings %v: want the loopback server refused", len(extras), w.msg)
	}
}

func TestValidate(t *testing.T) {
	// Each bad spec breaks one rule and must be refused for that rule,
	// not for another (a spec refused for its name would pass any case).
	for _, tt := range []struct {
		spec *agentv1.McpServer
		want string
	}{
		{&agentv1.McpServer{Name: "bad name", Command: "x"}, "letters, digits"},
		{&agentv1.McpServer{Name: strings.Repeat("a", 33), Command: "x"}, "letters, digits"},
		{&agentv1.McpServer{Name: "a"}, "exactly one of command"},
		{&agentv1.McpServer{Name: "a", Command: "x", Url: "http://x"}, "exactly one of command"},
		{&agentv1.McpServer{Name: "a", Url: "http://x", Place: agentv1.HookPlace_HOOK_PLACE_SANDBOX}, "place sandbox is for stdio servers"},
		{&agentv1.McpServer{Name: "a", Command: "x", StartupTimeout: durationpb.New(0)}, "startup_timeout"},
		{&agentv1.McpServer{Name: "a", Command: "x", StartupTimeout: durationpb.New(-time.Second)}, "startup_timeout"},
	} {
		err := Validate(tt.spec)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate(%v) = %v, want an error saying %q", tt.spec, err, tt.want)
		}
	}
	for _, ok := range []*agentv1.McpServer{
		{Name: "ok-1", Url: "http://x"},
		{Name: strings.Repeat("a", 32), Command: "x", StartupTimeout: durationpb.New(time.Second)},
		{Name: "boxed", Command: "x", Place: agentv1.HookPlace_HOOK_PLACE_SANDBOX},
	} {
		if err := Validate(ok); err != nil {
			t.Errorf("Validate(%v): %v", ok, err)
		}
	}
}

// BenchmarkMCPStdio compares an MCP tool call over stdio with the same
// work (echo a text) done by an in-process tool, both through a tool set.
func BenchmarkMCPStdio(b *testing.B) {
	w := &warnings{}
	m, extras := Start(context.Background(), []Server{{Spec: stdioSpec("s")}}, w.add, newTestLogger(b))
	defer m.Close()
	extras = append(extras, tools.Extra{Name: "echo", Description: "Returns the text.",
		Parameters: `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`,
		Run:        func(_ context.Context, _ string, args []byte) (string, bool) { return string(args), false }})
	set := tools.NewSet("openai", tools.Full, tools.Env{Extra: extras}, nil)
	ctx := context.Background()
	var builtin, viaMCP int64
	for b.Loop() {
		t0 := nanotime()
		set.Run(ctx, tools.Call{Name: "echo", Arguments: `{"text":"hello"}`})
		t1 := nanotime()
		if r := set.Run(ctx, tools.Call{Name: "mcp__s__echo", Arguments: `{"text":"hello"}`}); r.IsError {
			b.Fatal(r.Output)
		}
		builtin += t1 - t0
		viaMCP += nanotime() - t1
	}
	b.ReportMetric(float64(builtin)/float64(b.N), "builtin-ns/call")
	b.ReportMetric(float64(viaMCP)/float64(b.N), "mcp-stdio-ns/call")
	b.ReportMetric(float64(viaMCP)/float64(builtin), "ratio")
}
