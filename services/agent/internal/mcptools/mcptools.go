// Package mcptools connects a session to its MCP servers (stdio on the
// agent's host, or streamable HTTP) with the official Go SDK and offers
// their tools as mcp__<server>__<tool>. A server that does not start and
// a tool whose input schema is not valid JSON Schema are left out with a
// warning; a server that crashes is restarted once, after which its tools
// report it.
package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fabro-sh/fabro-go/platform/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/tools"
)

// Defaults.
const (
	DefaultStartupTimeout = 10 * time.Second
	// OutputLimit cuts an MCP tool's text like shell's.
	OutputLimit = 30_000
)

var (
	serverName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	// Provider tool names: at most 64 of these characters.
	toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// Validate checks one server's configuration.
func Validate(s *agentv1.McpServer) error {
	if !serverName.MatchString(s.GetName()) {
		return fmt.Errorf("MCP server name %q: letters, digits, _ and - only, at most 32", s.GetName())
	}
	if (s.GetCommand() == "") == (s.GetUrl() == "") {
		return fmt.Errorf("MCP server %q: give exactly one of command (stdio) and url (streamable HTTP)", s.GetName())
	}
	if s.GetPlace() == agentv1.HookPlace_HOOK_PLACE_SANDBOX && s.GetUrl() != "" {
		return fmt.Errorf("MCP server %q: place sandbox is for stdio servers (a command); an HTTP server is reached at its url", s.GetName())
	}
	if d := s.GetStartupTimeout(); d != nil && (d.CheckValid() != nil || d.AsDuration() <= 0) {
		return fmt.Errorf("MCP server %q: startup_timeout must be a positive duration", s.GetName())
	}
	return nil
}

// Manager holds a session's MCP connections. Close ends them.
type Manager struct {
	logger  *slog.Logger
	servers []*server
}

// Server is one server to start; HTTPClient, when set, is what a
// streamable HTTP server is dialled with; Sandbox, for a stdio server with
// place sandbox, is where it runs (sandbox.go).
type Server struct {
	Spec       *agentv1.McpServer
	HTTPClient *http.Client
	Sandbox    *SandboxTarget
}

type server struct {
	spec   *agentv1.McpServer
	hc     *http.Client
	sb     *SandboxTarget
	client *mcp.Client

	mu       sync.Mutex
	session  *mcp.ClientSession // nil while down
	restarts int
	dead     error // set after the second crash
	closed   bool
}

// Start connects to every server and lists its tools; warn reports what
// is left out. It never fails: a server that does not start is left out.
func Start(ctx context.Context, servers []Server, warn func(*agentv1.ExtensionFailed), logger *slog.Logger) (*Manager, []tools.Extra) {
	m := &Manager{logger: logger}
	var extras []tools.Extra
	for _, srv := range servers {
		spec := srv.Spec
		s := &server{spec: spec, hc: srv.HTTPClient, sb: srv.Sandbox, client: mcp.NewClient(&mcp.Implementation{Name: "fabro-agent", Version: "v1"}, nil)}
		if err := s.connect(ctx); err != nil {
			logger.Warn("mcp server", "server", spec.GetName(), "error", err)
			warn(&agentv1.ExtensionFailed{Server: spec.GetName(), Reason: fmt.Sprintf("MCP server %q did not start and its tools are left out: %v", spec.GetName(), err)})
			continue
		}
		m.servers = append(m.servers, s)
		list, err := s.listTools(ctx)
		if err != nil {
			logger.Warn("mcp server", "server", spec.GetName(), "error", err)
			warn(&agentv1.ExtensionFailed{Server: spec.GetName(), Reason: fmt.Sprintf("MCP server %q did not list its tools, which are left out: %v", spec.GetName(), err)})
			continue
		}
		for _, t := range list {
			x, err := s.extra(t)
			if err != nil {
				logger.Warn("mcp tool", "server", spec.GetName(), "tool", t.Name, "error", err)
				warn(&agentv1.ExtensionFailed{Server: spec.GetName(), Tool: t.Name, Reason: fmt.Sprintf("MCP server %q: tool %q is left out: %v", spec.GetName(), t.Name, err)})
				continue
			}
			extras = append(extras, x)
		}
	}
	return m, extras
}

// Close ends every connection (stdio servers get their stdin closed, then
// TERM after 2 s).
func (m *Manager) Close() {
	if m == nil {
		return
	}
	for _, s := range m.servers {
		s.mu.Lock()
		s.closed = true
		sess := s.session
		s.session = nil
		s.mu.Unlock()
		if sess != nil {
			_ = sess.Close()
		}
	}
}

func (s *server) connect(ctx context.Context) error {
	timeout := DefaultStartupTimeout
	if d := s.spec.GetStartupTimeout(); d != nil {
		timeout = d.AsDuration()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var t mcp.Transport
	switch {
	case s.spec.GetUrl() != "":
		t = &mcp.StreamableClientTransport{Endpoint: s.spec.GetUrl(), HTTPClient: s.hc, MaxRetries: 1}
	case s.spec.GetPlace() == agentv1.HookPlace_HOOK_PLACE_SANDBOX:
		if s.sb == nil {
			return fmt.Errorf("place sandbox, but the session has no sandbox to run it in")
		}
		t = &sandboxTransport{target: s.sb, spec: &ServerSpec{Command: s.spec.GetCommand(), Args: s.spec.GetArgs(), Env: s.spec.GetEnv()}}
	default:
		cmd := exec.Command(s.spec.GetCommand(), s.spec.GetArgs()...)
		cmd.Env = os.Environ()
		for _, k := range slices.Sorted(maps.Keys(s.spec.GetEnv())) {
			cmd.Env = append(cmd.Env, k+"="+s.spec.GetEnv()[k])
		}
		t = &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	sess, err := s.client.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return sess.Close()
	}
	s.session = sess
	s.mu.Unlock()
	return nil
}

func (s *server) listTools(ctx context.Context) ([]*mcp.Tool, error) {
	s.mu.Lock()
	sess := s.session
	s.mu.Unlock()
	var out []*mcp.Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// extra validates a tool and wraps it.
func (s *server) extra(t *mcp.Tool) (tools.Extra, error) {
	name := "mcp__" + s.spec.GetName() + "__" + t.Name
	if !toolName.MatchString(name) {
		return tools.Extra{}, fmt.Errorf("the name %s is not a valid tool name (letters, digits, _ and -, at most 64)", name)
	}
	raw, err := json.Marshal(t.InputSchema)
	if err != nil {
		return tools.Extra{}, fmt.Errorf("its input schema: %v", err)
	}
	if _, err := Compile(raw); err != nil {
		return tools.Extra{}, err
	}
	return tools.Extra{
		Name:        name,
		Description: t.Description,
		Parameters:  string(raw),
		Category:    tools.CategoryShell,
		Limit:       tools.Limit{MaxChars: OutputLimit, Mode: tools.HeadTail},
		// The tool set validated args against Parameters (platform/jsonschema).
		RunImages: func(ctx context.Context, _ string, args []byte) (string, []tools.Image, bool) {
			return s.call(ctx, t.Name, json.RawMessage(args))
		},
	}, nil
}

// Compile checks that raw is a valid JSON Schema of an object.
func Compile(raw []byte) (*jsonschema.Schema, error) {
	sc, err := jsonschema.CompileCached(raw)
	if err != nil {
		return nil, fmt.Errorf("its input schema is not valid JSON Schema: %v", err)
	}
	if t := sc.Types(); len(t) != 1 || t[0] != "object" {
		return nil, fmt.Errorf("its input schema is not an object schema (type %q)", strings.Join(t, ","))
	}
	return sc, nil
}

// call runs one tool call; a crash restarts the server once.
func (s *server) call(ctx context.Context, tool string, args json.RawMessage) (string, []tools.Image, bool) {
	s.mu.Lock()
	sess, dead := s.session, s.dead
	s.mu.Unlock()
	if dead != nil {
		return fmt.Sprintf("The MCP server %q is unavailable: %v.", s.spec.GetName(), dead), nil, true
	}
	if sess == nil {
		return fmt.Sprintf("The MCP server %q is unavailable.", s.spec.GetName()), nil, true
	}
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err == nil {
		return render(res)
	}
	if ctx.Err() != nil {
		return "Cancelled", nil, true
	}
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		return fmt.Sprintf("The MCP server %q refused the call: %s", s.spec.GetName(), werr.Message), nil, true
	}
	// The connection broke: the server crashed (or its HTTP endpoint went).
	return s.crashed(ctx, sess, err), nil, true
}

func (s *server) crashed(ctx context.Context, sess *mcp.ClientSession, cause error) string {
	s.mu.Lock()
	if s.session != sess || s.closed { // another call already handled it
		s.mu.Unlock()
		return fmt.Sprintf("The MCP server %q failed during the call: %v", s.spec.GetName(), cause)
	}
	s.session = nil
	first := s.restarts == 0
	s.restarts++
	if !first {
		s.dead = fmt.Errorf("it crashed again after a restart (%v)", cause)
	}
	s.mu.Unlock()
	_ = sess.Close()
	name := s.spec.GetName()
	if !first {
		return fmt.Sprintf("The MCP server %q crashed again during the call (%v); it was already restarted once, so its tools are now unavailable.", name, cause)
	}
	if err := s.connect(context.WithoutCancel(ctx)); err != nil {
		s.mu.Lock()
		s.dead = fmt.Errorf("it crashed and did not restart (%v)", err)
		s.mu.Unlock()
		return fmt.Sprintf("The MCP server %q crashed during the call (%v) and did not restart: %v", name, cause, err)
	}
	return fmt.Sprintf("The MCP server %q crashed during the call (%v) and was restarted; the call did not complete. You may retry it.", name, cause)
}

// render maps a result: text parts joined, images kept, other content
// described; isError as the server says.
func render(res *mcp.CallToolResult) (string, []tools.Image, bool) {
	var parts []string
	var images []tools.Image
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			images = append(images, tools.Image{MediaType: c.MIMEType, Data: c.Data})
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s: %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				parts = append(parts, c.Resource.Text)
			} else if c.Resource != nil {
				parts = append(parts, fmt.Sprintf("[resource %s, %d bytes]", c.Resource.URI, len(c.Resource.Blob)))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		parts = append(parts, string(b))
	}
	return strings.Join(parts, "\n"), images, res.IsError
}
