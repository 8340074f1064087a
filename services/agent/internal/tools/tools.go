// Package tools is the agent's built-in tool set: shell, file, search, web,
// patch and todo tools, chosen per provider profile and permission level,
// with argument validation against each tool's JSON schema and per-tool
// output truncation. Every tool acts through the sandbox service's gRPC
// contract (or, for web tools, an SSRF-guarded HTTP client); none touches
// the host directly.
package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/jsonschema"
)

// Sandbox is the part of the sandbox service the tools use.
// [sandboxv1.SandboxServiceClient] satisfies it.
type Sandbox interface {
	ReadFile(ctx context.Context, in *sandboxv1.ReadFileRequest, opts ...grpc.CallOption) (*sandboxv1.ReadFileResponse, error)
	ReadFileBytes(ctx context.Context, in *sandboxv1.ReadFileBytesRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[sandboxv1.ReadFileBytesResponse], error)
	WriteFile(ctx context.Context, in *sandboxv1.WriteFileRequest, opts ...grpc.CallOption) (*sandboxv1.WriteFileResponse, error)
	DeleteFile(ctx context.Context, in *sandboxv1.DeleteFileRequest, opts ...grpc.CallOption) (*sandboxv1.DeleteFileResponse, error)
	StatFile(ctx context.Context, in *sandboxv1.StatFileRequest, opts ...grpc.CallOption) (*sandboxv1.StatFileResponse, error)
	ListDirectory(ctx context.Context, in *sandboxv1.ListDirectoryRequest, opts ...grpc.CallOption) (*sandboxv1.ListDirectoryResponse, error)
	ExecStream(ctx context.Context, in *sandboxv1.ExecStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[sandboxv1.ExecStreamResponse], error)
	Grep(ctx context.Context, in *sandboxv1.GrepRequest, opts ...grpc.CallOption) (*sandboxv1.GrepResponse, error)
	Glob(ctx context.Context, in *sandboxv1.GlobRequest, opts ...grpc.CallOption) (*sandboxv1.GlobResponse, error)
}

var _ Sandbox = sandboxv1.SandboxServiceClient(nil)

// Env is what the tools of one agent session act on.
type Env struct {
	// Sandbox is the sandbox service client.
	Sandbox Sandbox
	// SandboxID is the sandbox the tools act in.
	SandboxID string
	// WorkDir is the sandbox's working directory (in the sandbox's view).
	// Relative paths in tool arguments resolve against it, and glob and
	// grep report absolute paths under it so read_file can take them as
	// they are. Empty: paths are passed through and results stay relative.
	WorkDir string
	// SessionID is the calling session; it is the list id of an
	// update_plan plan and is passed to the TodoStore's callback.
	SessionID string

	// Summarize answers web_fetch's prompt about a page with a small
	// model. Nil: web_fetch returns the page content.
	Summarize func(ctx context.Context, prompt, content string) (string, error)
	// Credential returns a secret by name (BRAVE_SEARCH_API_KEY), from
	// the vault. Nil or an empty value: web_search reports the key as
	// missing.
	Credential func(ctx context.Context, name string) (string, error)
	// HTTPClient is the base client of web_fetch and web_search. web_fetch
	// always uses a copy with the SSRF guard (unless AllowPrivateNetwork);
	// nil means a default client.
	HTTPClient *http.Client
	// AllowPrivateNetwork turns the SSRF guard off. For tests only.
	AllowPrivateNetwork bool
	// BraveBaseURL is the Brave Search API; default
	// https://api.search.brave.com.
	BraveBaseURL string

	// Todos is the todo list update_plan or Task* maintain: shared by a
	// root session and its subagents for tasks, one per session for a
	// plan. Nil: the set keeps a private list.
	Todos *TodoStore

	// DefaultCommandTimeout is the shell timeout when the model gives
	// none; zero means the profile's default (10 s, 120 s for anthropic).
	DefaultCommandTimeout time.Duration
	// MaxCommandTimeout caps every shell timeout; zero means 600 s.
	MaxCommandTimeout time.Duration
	// ShellOutput, when set, receives shell output as the command writes
	// it (for ToolCallOutputDelta events), at most MaxLiveOutput bytes per
	// call. It must not block for long.
	ShellOutput func(callID string, stream sandboxv1.OutputStream, data []byte)

	// Extra are tools the caller implements (subagent and skill tools),
	// offered after the profile's tools and run like them: arguments
	// checked against their schema, permission gated, output cut to their
	// limit.
	Extra []Extra

	// Lifted reports a tool a permission rule may allow below the level
	// (an allow rule names it): it is offered, and Run leaves each call's
	// verdict to the caller's rules. Nil: none.
	Lifted func(name string) bool
	// Conceal says, for each path a search or listing found (grep, glob,
	// list_dir; absolute, below dir), why the permission rules keep it
	// from the model ("" shows it). Nil: everything is shown.
	Conceal func(ctx context.Context, dir string, paths []string) ([]string, error)
}

// Category is an extra tool's permission category.
type Category int

// Categories of extra tools. Subagent tools are allowed at every level;
// everything that is neither read, write nor subagent gates as shell.
const (
	CategoryShell Category = iota
	CategorySubagent
)

// Extra is a tool implemented outside this package.
type Extra struct {
	Name        string
	Description string
	// Parameters is the JSON Schema of the arguments (any draft 2020-12
	// keyword, validated by platform/jsonschema); one that does not
	// compile or names no type accepts any object.
	Parameters string
	Category   Category
	// Run performs a call whose arguments passed the schema. A failure is
	// reported with isError; it never fails the turn.
	Run func(ctx context.Context, callID string, args []byte) (text string, isError bool)
	// RunImages, when set instead of Run, may also return images (an MCP
	// tool's image content).
	RunImages func(ctx context.Context, callID string, args []byte) (text string, images []Image, isError bool)
	// Limit is the tool's default output limit (zero: none); the session's
	// tool_output_limits override it.
	Limit Limit
}

// Image is an image a tool returns beside its text.
type Image struct {
	MediaType string
	Data      []byte
}

// Call is one tool call from the model.
type Call struct {
	// ID is the provider's call id.
	ID string
	// Name is the tool name as the model called it.
	Name string
	// Arguments is the JSON text the model gave; empty means {}.
	Arguments string
}

// Error kinds of a [Result].
const (
	KindUnknownTool        = "unknown_tool"
	KindInvalidArguments   = "invalid_arguments"
	KindDenied             = "denied"
	KindFailed             = "failed"
	KindCancelled          = "cancelled"
	KindTimeout            = "timeout"
	KindSandboxUnavailable = "sandbox_unavailable"
)

// Result is what a tool call gives back.
type Result struct {
	// Output is what the model sees: the tool's output cut to the tool's
	// limit, with a marker where text was removed.
	Output string
	// IsError is true when the call failed; Output then says why.
	IsError bool
	// ErrorKind classifies a failure: one of the Kind constants.
	ErrorKind string
	// Truncated is true when Output is shorter than Full.
	Truncated bool

	// Full is the output before the per-tool limit (itself capped at
	// 1 MiB as head and tail), for the ToolCallCompleted event.
	Full string
	// CharsOmitted is how many characters of Full the limit removed.
	CharsOmitted int64
	// ObservedBytes counts the output the tool really observed, including
	// what was cut before Full: the bytes the sandbox dropped from a
	// command's output, the page text past web_fetch's cap, and what the
	// 1 MiB retention cap removed. Omission markers are not counted.
	ObservedBytes int64
	// RetainedBytes is how many of ObservedBytes Full keeps, and
	// OmittedBytes how many it lacks (ObservedBytes - RetainedBytes).
	RetainedBytes, OmittedBytes int64
	// Process is how the shell's command ended; nil for other tools.
	Process *agentv1.ProcessOutcome
	// Images are images the tool returned (extra tools only).
	Images []Image
}

// ErrorKindProto maps ErrorKind to the event's enum.
func (r Result) ErrorKindProto() agentv1.ToolErrorKind {
	switch r.ErrorKind {
	case KindUnknownTool:
		return agentv1.ToolErrorKind_TOOL_ERROR_KIND_UNKNOWN_TOOL
	case KindInvalidArguments:
		return agentv1.ToolErrorKind_TOOL_ERROR_KIND_INVALID_ARGUMENTS
	case KindDenied:
		return agentv1.ToolErrorKind_TOOL_ERROR_KIND_DENIED
	case KindFailed:
		return agentv1.ToolErrorKind_TOOL_ERROR_KIND_FAILED
	case KindCancelled:
		return agentv1.ToolErrorKind_TOOL_ERROR_KIND_CANCELLED
	case KindTimeout:
		return agentv1.ToolErrorKind_TOOL_ERROR_KIND_TIMED_OUT
	case KindSandboxUnavailable:
		return agentv1.ToolErrorKind_TOOL_ERROR_KIND_SANDBOX_UNAVAILABLE
	}
	return agentv1.ToolErrorKind_TOOL_ERROR_KIND_UNSPECIFIED
}

// PermissionLevel decides which tool categories a session may use.
type PermissionLevel int

// Permission levels, numbered as agentv1.PermissionLevel. The zero value
// means ReadWrite.
const (
	ReadOnly  PermissionLevel = 1 // read tools only
	ReadWrite PermissionLevel = 2 // read and write tools
	Full      PermissionLevel = 3 // everything: shell, web, todo tools too
)

// LevelFromProto converts the API's permission level (unset = ReadWrite).
func LevelFromProto(l agentv1.PermissionLevel) PermissionLevel {
	switch l {
	case agentv1.PermissionLevel_PERMISSION_LEVEL_READ_ONLY:
		return ReadOnly
	case agentv1.PermissionLevel_PERMISSION_LEVEL_FULL:
		return Full
	}
	return ReadWrite
}

func (l PermissionLevel) String() string {
	switch l {
	case ReadOnly:
		return "read-only"
	case Full:
		return "full"
	}
	return "read-write"
}

// category is a tool's permission category (upstream 2.13): everything
// that is neither read nor write gates as shell.
type category int

const (
	catRead category = iota
	catWrite
	catShell
	catSubagent
	// catTodo is update_plan and the Task tools: they change no files and
	// run from read-write up.
	catTodo
)

func (l PermissionLevel) allows(c category) bool {
	switch l {
	case ReadOnly:
		return c == catRead || c == catSubagent
	case Full:
		return true
	}
	return c != catShell // read-write, and the zero value
}

// Profile names [NewSet] understands directly; other names map to the
// nearest with [Profile].
const (
	ProfileAnthropic = "anthropic"
	ProfileOpenAI    = "openai"
	ProfileGemini    = "gemini"
)

// Profile maps a catalog agent profile to the tool set it uses:
// anthropic and claude-5 to anthropic; gemini to gemini; everything else
// (openai, gpt56, gpt6, kimi, unknown) to openai, as upstream does.
func Profile(name string) string {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "anthropic", "claude-5", "claude5", "bedrock":
		return ProfileAnthropic
	case "gemini":
		return ProfileGemini
	}
	return ProfileOpenAI
}

// DefaultCommandTimeout is the shell timeout of a catalog agent profile:
// 120 s for anthropic and claude-5, 60 s for kimi, 10 s otherwise.
func DefaultCommandTimeout(profile string) time.Duration {
	switch strings.ToLower(strings.TrimSpace(profile)) {
	case "anthropic", "claude-5", "claude5", "bedrock":
		return 120 * time.Second
	case "kimi":
		return 60 * time.Second
	}
	return 10 * time.Second
}

// MaxCommandTimeout is the cap on every shell timeout.
const MaxCommandTimeout = 600 * time.Second

// tool is one built-in tool.
type tool struct {
	name        string
	description string
	schema      *schema
	category    category
	serial      bool
	run         func(ctx context.Context, s *Set, c Call, args []byte) (output, error)
}

// output is a tool's successful result; a tool may also mark it failed
// (a non-zero shell exit) while keeping its rendered text.
type output struct {
	images  []Image
	text    string
	failed  bool
	kind    string
	process *agentv1.ProcessOutcome
	// cut counts bytes of the tool's output left out of text before it
	// got here (the sandbox's capture limit, web_fetch's cap); markers
	// counts the bytes of the notes text holds in their place.
	cut, markers int64
}

func ok(text string) (output, error) { return output{text: text}, nil }

var (
	coreTools     = []string{"shell", "read_file", "write_file", "grep", "glob", "web_search", "web_fetch"}
	profileExtras = map[string][]string{
		ProfileAnthropic: {"edit_file", "TaskCreate", "TaskUpdate", "TaskGet", "TaskList"},
		ProfileOpenAI:    {"apply_patch", "update_plan"},
		ProfileGemini:    {"edit_file", "read_many_files", "list_dir"},
	}
	registryOnce sync.Once
	registry     map[string]*tool
)

func builtins() map[string]*tool {
	registryOnce.Do(func() {
		registry = map[string]*tool{}
		for _, t := range []*tool{
			shellTool(), readFileTool(), writeFileTool(), grepTool(), globTool(),
			webSearchTool(), webFetchTool(), editFileTool(), applyPatchTool(),
			updatePlanTool(), taskCreateTool(), taskUpdateTool(), taskGetTool(), taskListTool(),
			readManyFilesTool(), listDirTool(),
		} {
			registry[t.name] = t
		}
	})
	return registry
}

// Set is the tool set of one session: its profile's tools, the ones its
// permission level allows visible, the others refused.
type Set struct {
	env     Env
	profile string
	level   PermissionLevel
	limits  map[string]Limit

	tools   []*tool          // the profile's tools, in definition order
	byName  map[string]*tool // the profile's tools
	visible []*tool

	defaultTimeout, maxTimeout time.Duration
	fetchClient                *http.Client
	searchClient               *http.Client
	// allowAddr, when set, lets these addresses through the SSRF guard
	// (tests only: the httptest server of a redirect test).
	allowAddr func(addr string) bool

	// writeMu serializes read-modify-write tools (edit_file, apply_patch)
	// of this session, so two parallel edits of a file never lose one.
	writeMu sync.Mutex
}

// NewSet returns the tool set of a session. profile is a catalog agent
// profile (see [Profile]); limits override the default output limits per
// tool name.
func NewSet(profile string, level PermissionLevel, env Env, limits map[string]Limit) *Set {
	s := &Set{env: env, profile: Profile(profile), level: level, byName: map[string]*tool{}}
	if s.level < ReadOnly || s.level > Full {
		s.level = ReadWrite
	}
	s.limits = map[string]Limit{}
	for name, l := range defaultLimits {
		s.limits[name] = l
	}
	for name, l := range limits {
		s.limits[name] = l
	}
	reg := builtins()
	for _, name := range append(slices.Clone(coreTools), profileExtras[s.profile]...) {
		t := reg[name]
		s.tools = append(s.tools, t)
		s.byName[name] = t
		if s.level.allows(t.category) || s.lifted(name) {
			s.visible = append(s.visible, t)
		}
	}
	for _, x := range env.Extra {
		if _, dup := s.byName[x.Name]; dup || x.Run == nil && x.RunImages == nil {
			continue
		}
		if _, set := limits[x.Name]; !set && (x.Limit.MaxChars > 0 || x.Limit.MaxLines > 0) {
			s.limits[x.Name] = x.Limit
		}
		t := extraTool(x)
		s.tools = append(s.tools, t)
		s.byName[t.name] = t
		if s.level.allows(t.category) || s.lifted(t.name) {
			s.visible = append(s.visible, t)
		}
	}
	s.defaultTimeout = env.DefaultCommandTimeout
	if s.defaultTimeout <= 0 {
		s.defaultTimeout = DefaultCommandTimeout(profile)
	}
	s.maxTimeout = env.MaxCommandTimeout
	if s.maxTimeout <= 0 {
		s.maxTimeout = MaxCommandTimeout
	}
	s.defaultTimeout = min(s.defaultTimeout, s.maxTimeout)
	if s.env.Todos == nil {
		kind := agentv1.TodoListKind_TODO_LIST_KIND_OPENAI_PLAN
		if s.profile == ProfileAnthropic {
			kind = agentv1.TodoListKind_TODO_LIST_KIND_ANTHROPIC_TASKS
		}
		s.env.Todos = NewTodoStore(env.SessionID, kind, nil)
	}
	if s.env.BraveBaseURL == "" {
		s.env.BraveBaseURL = defaultBraveBaseURL
	}
	s.searchClient = env.HTTPClient
	if s.searchClient == nil {
		s.searchClient = &http.Client{Timeout: 30 * time.Second}
	}
	s.fetchClient = s.guardedClient(env.HTTPClient)
	return s
}

// Profile returns the tool profile the set was built for.
func (s *Set) Profile() string { return s.profile }

// Names returns the names of the tools the model is offered, in order.
func (s *Set) Names() []string {
	names := make([]string, len(s.visible))
	for i, t := range s.visible {
		names[i] = t.name
	}
	return names
}

// Definitions returns the tools the model is offered: those of the profile
// the permission level allows.
func (s *Set) Definitions() []*llmv1.ToolDefinition {
	defs := make([]*llmv1.ToolDefinition, len(s.visible))
	for i, t := range s.visible {
		defs[i] = &llmv1.ToolDefinition{Name: t.name, Description: t.description, Parameters: t.schema.json()}
	}
	return defs
}

// Serial reports whether calls of the tool must not run alongside others
// (shell: a round holding a shell call runs one call at a time).
func (s *Set) Serial(name string) bool {
	t, ok := s.byName[name]
	return ok && t.serial
}

// Run runs one call. It never panics and never fails: every problem
// (malformed JSON, schema violations, unknown or denied tools, sandbox
// errors, cancellation) is an error Result the model sees. Output is cut to
// the tool's limit.
func (s *Set) Run(ctx context.Context, c Call) (res Result) {
	defer func() {
		if p := recover(); p != nil {
			res = s.finish(c.Name, output{text: fmt.Sprintf("Tool %s failed with an internal error: %v", c.Name, p), failed: true, kind: KindFailed})
		}
	}()
	t, known := s.byName[c.Name]
	if !known {
		return s.finish(c.Name, output{failed: true, kind: KindUnknownTool,
			text: fmt.Sprintf("Unknown tool: %q. Available tools: %s.", c.Name, strings.Join(s.Names(), ", "))})
	}
	if why := s.Refusal(c.Name); why != "" && !s.lifted(c.Name) {
		return s.finish(c.Name, output{failed: true, kind: KindDenied, text: why})
	}
	arguments := c.Arguments
	if t.name == "apply_patch" && isRawPatch(arguments) {
		// A freeform (custom) tool call carries the patch itself, not JSON.
		b, _ := json.Marshal(map[string]string{"patch": arguments})
		arguments = string(b)
	}
	args, err := t.schema.validateJSON(arguments)
	if err != nil {
		return s.finish(c.Name, output{failed: true, kind: KindInvalidArguments, text: "Tool argument validation failed: " + err.Error()})
	}
	if err := ctx.Err(); err != nil {
		return s.finish(c.Name, output{failed: true, kind: KindCancelled, text: "Cancelled"})
	}
	out, err := t.run(ctx, s, c, args)
	if err != nil {
		out = s.describe(ctx, err)
	}
	return s.finish(c.Name, out)
}

// Refusal says why the permission level refuses a tool; "" when it allows
// it or does not know it. It is the permission-level link of the agent's
// tool middleware chain (Run checks it too, for callers without one).
func (s *Set) Refusal(name string) string {
	t, ok := s.byName[name]
	if !ok || s.level.allows(t.category) {
		return ""
	}
	return fmt.Sprintf("Tool %s is not allowed at permission level %s.", name, s.level)
}

func (s *Set) lifted(name string) bool { return s.env.Lifted != nil && s.env.Lifted(name) }

// conceal drops the paths the permission rules keep from the model and
// says how many went and why.
func (s *Set) conceal(ctx context.Context, dir string, paths []string) (keep []bool, note string, err error) {
	keep = make([]bool, len(paths))
	for i := range keep {
		keep[i] = true
	}
	if s.env.Conceal == nil || len(paths) == 0 {
		return keep, "", nil
	}
	why, err := s.env.Conceal(ctx, dir, paths)
	if err != nil {
		return nil, "", err
	}
	n, first := 0, ""
	for i, w := range why {
		if w != "" {
			keep[i] = false
			if n == 0 {
				first = w
			}
			n++
		}
	}
	if n > 0 {
		note = fmt.Sprintf("[%d result(s) not shown: %s.]\n", n, first)
	}
	return keep, note, nil
}

// finish applies the retention cap and the tool's limit.
func (s *Set) finish(name string, out output) Result {
	full, dropped := retainCount(out.text)
	model, omitted := truncateFor(full, s.limits[name], name)
	observed := max(int64(len(out.text))-out.markers, 0) + out.cut
	lost := out.cut + dropped
	r := Result{Output: model, Full: full, Truncated: omitted > 0, CharsOmitted: omitted, Process: out.process,
		ObservedBytes: observed, RetainedBytes: max(observed-lost, 0), OmittedBytes: lost, Images: out.images}
	if out.failed {
		r.IsError = true
		r.ErrorKind = out.kind
		if r.ErrorKind == "" {
			r.ErrorKind = KindFailed
		}
	}
	return r
}

// extraTool wraps a caller's tool; a schema that does not compile, or
// names no type, accepts any object.
func extraTool(x Extra) *tool {
	sc := &schema{Type: "object"}
	if c, err := jsonschema.CompileCached([]byte(x.Parameters)); err == nil && c.Types() != nil {
		sc = &schema{raw: x.Parameters, compiled: c}
	}
	cat := catShell
	if x.Category == CategorySubagent {
		cat = catSubagent
	}
	run, runImages := x.Run, x.RunImages
	return &tool{name: x.Name, description: x.Description, schema: sc, category: cat,
		run: func(ctx context.Context, _ *Set, c Call, args []byte) (output, error) {
			if runImages != nil {
				text, images, isErr := runImages(ctx, c.ID, args)
				return output{text: text, images: images, failed: isErr}, nil
			}
			text, isErr := run(ctx, c.ID, args)
			return output{text: text, failed: isErr}, nil
		}}
}

// isRawPatch reports arguments that are a v4a patch rather than JSON.
func isRawPatch(arguments string) bool {
	a := strings.TrimSpace(arguments)
	return strings.HasPrefix(a, patchBegin) || strings.HasPrefix(a, "<<")
}

// IsBuiltin reports a name a built-in tool of any profile has.
func IsBuiltin(name string) bool {
	_, ok := builtins()[name]
	return ok
}

// ListDirectory lists every page of a directory: the sandbox service pages
// ListDirectory, and a tool shows the whole listing.
func ListDirectory(ctx context.Context, sb Sandbox, req *sandboxv1.ListDirectoryRequest) (*sandboxv1.ListDirectoryResponse, error) {
	all := &sandboxv1.ListDirectoryResponse{}
	req = proto.CloneOf(req)
	req.PageSize = 1000
	for {
		resp, err := sb.ListDirectory(ctx, req)
		if err != nil {
			return nil, err
		}
		all.Entries = append(all.Entries, resp.GetEntries()...)
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			return all, nil
		}
	}
}
