// Package daytona is the sandbox driver for Daytona's cloud sandboxes,
// through Daytona's published REST API: sandbox create, start, stop and
// delete under /sandbox, and the toolbox under /toolbox/{id}/toolbox
// (process/execute, files/upload, files/download, files). Its URL and key
// (DAYTONA_API_URL, DAYTONA_API_KEY) come from the vault on every call.
//
// Daytona's toolbox runs a command without a shell, merges its output and
// follows any symbolic link in a file path. So the driver uploads a helper
// (helper.pl) into each sandbox and does every operation through it: paths
// confined to the root with links resolved by hand, commands run by bash -c
// under a supervisor that keeps stdout and stderr apart, feeds stdin, times
// out with TERM then KILL, and kills every descendant. Output is fetched
// after the command ends (no live streaming) with files/download.
package daytona

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fabro-sh/fabro-go/sdk/sandbox/driver"
)

// Name is the driver's name in a spec.
const Name = "daytona"

//go:embed helper.pl
var helperScript []byte

// LabelSandboxID is the Daytona label naming the service's sandbox id, by
// which a sandbox is found again after a restart.
const LabelSandboxID = "fabro.sandbox_id"

// Config configures the driver.
type Config struct {
	// Credentials resolves DAYTONA_API_URL and DAYTONA_API_KEY (required).
	Credentials Credentials
	// HTTPClient defaults to one with a 15-minute timeout (a command may
	// run 10 minutes).
	HTTPClient *http.Client
	// Snapshot is the snapshot sandboxes are created from; "" is
	// Daytona's default. It must have bash and perl.
	Snapshot string
	// Target is the region; "" is the organization's default.
	Target string
	// StartTimeout bounds the wait for a sandbox to start; default 3 min.
	StartTimeout time.Duration
	// PollInterval is the first wait between state polls; default 250 ms.
	PollInterval time.Duration
	// Retry bounds transient failures.
	Retry Retry
}

// Driver is the Daytona driver.
type Driver struct {
	cfg Config
	c   *client
}

var (
	_ driver.Driver   = (*Driver)(nil)
	_ driver.Reopener = (*Driver)(nil)
)

// New returns the driver.
func New(cfg Config) *Driver {
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Minute}
	}
	cfg.StartTimeout = cmp.Or(cfg.StartTimeout, 3*time.Minute)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, 250*time.Millisecond)
	return &Driver{cfg: cfg, c: &client{creds: cfg.Credentials, http: hc, retry: cfg.Retry}}
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return Name }

// Capabilities implements driver.Driver. Daytona sandboxes are containers
// of their own. The toolbox's execute call answers only when the command
// has ended and has no stdin, stream or cancel; the helper's supervisor
// gives all three (stdin from a file, output polled from files as it
// grows, a stop file it watches), so output is live to within a poll.
// Memory (whole GiB) and CPU (whole cores) are Daytona's sandbox
// resources; networkBlockAll cuts the network; processes it cannot bound.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{
		Isolation: driver.IsolationContainer, LiveStreaming: true, StreamsSeparated: true, Stdin: true, Cancel: true, Commands: true,
		Limits: driver.LimitSupport{Memory: true, CPU: true, NetworkNone: true, Disk: true},
	}
}

// Available implements driver.Driver: the credentials resolve and Daytona
// answers a list of sandboxes.
func (d *Driver) Available(ctx context.Context) error {
	var list []sandboxDTO
	err := d.c.do(ctx, request{op: "list sandboxes", method: http.MethodGet, path: "/sandbox",
		query: url.Values{"labels": {`{"` + LabelSandboxID + `":"-"}`}}, out: &list})
	if err != nil {
		return fmt.Errorf("%w: %v", driver.ErrUnavailable, err)
	}
	return nil
}

// sandboxDTO is Daytona's Sandbox schema, the fields the driver reads.
type sandboxDTO struct {
	ID          string            `json:"id"`
	State       string            `json:"state"`
	ErrorReason string            `json:"errorReason"`
	Labels      map[string]string `json:"labels"`
}

// createSandboxDTO is Daytona's CreateSandbox schema, the fields the driver
// sets.
type createSandboxDTO struct {
	Snapshot        string            `json:"snapshot,omitempty"`
	Env             map[string]string `json:"env,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	NetworkBlockAll bool              `json:"networkBlockAll,omitempty"`
	Target          string            `json:"target,omitempty"`
	CPU             int               `json:"cpu,omitempty"`
	Memory          int               `json:"memory,omitempty"` // GB
	Disk            int               `json:"disk,omitempty"`   // GB
}

// limits turns the spec's limits into Daytona's resources: memory in whole
// GiB and CPU in whole cores, so anything finer cannot be enforced exactly
// (refused, or rounded up under best effort); a process count never.
func limits(l driver.Limits) (cpu, memGB, diskGB int, blockNet bool, err error) {
	var bad []string
	if l.MemoryBytes < 0 || l.Processes < 0 || l.CPU < 0 || l.DiskBytes < 0 {
		return 0, 0, 0, false, fmt.Errorf("%w: limits must not be negative", driver.ErrInvalid)
	}
	if l.DiskBytes > 0 {
		diskGB = int((l.DiskBytes + (1<<30 - 1)) >> 30)
		if l.DiskBytes%(1<<30) != 0 {
			bad = append(bad, "disk (Daytona allocates whole GiB)")
		}
	}
	if l.MemoryBytes > 0 {
		memGB = int((l.MemoryBytes + (1<<30 - 1)) >> 30)
		if l.MemoryBytes%(1<<30) != 0 {
			bad = append(bad, "memory (Daytona allocates whole GiB)")
		}
	}
	if l.CPU > 0 {
		cpu = int(math.Ceil(l.CPU))
		if float64(cpu) != l.CPU {
			bad = append(bad, "cpu (Daytona allocates whole cores)")
		}
	}
	if l.Processes > 0 {
		bad = append(bad, "processes")
	}
	blockNet = l.Network == driver.NetworkNone
	if len(bad) > 0 && !l.BestEffort {
		return 0, 0, 0, false, fmt.Errorf("%w: the daytona driver cannot enforce %s; mark the limits best-effort to run without", driver.ErrLimitUnsupported, strings.Join(bad, ", "))
	}
	return cpu, memGB, diskGB, blockNet, nil
}

// Create implements driver.Driver.
func (d *Driver) Create(ctx context.Context, spec driver.Spec) (driver.Sandbox, error) {
	for k := range spec.Options {
		return nil, fmt.Errorf("%w: driver_options: the daytona driver has no option %q", driver.ErrInvalid, k)
	}
	if spec.WorkingDirectory != "" && !strings.HasPrefix(spec.WorkingDirectory, "/") {
		return nil, fmt.Errorf("%w: working_directory %q must be an absolute path in the sandbox", driver.ErrInvalid, spec.WorkingDirectory)
	}
	cpu, mem, disk, block, err := limits(spec.Limits)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	if spec.ID != "" {
		labels[LabelSandboxID] = spec.ID
	}
	// A create is not safe to repeat: a 5xx may come after Daytona made
	// the sandbox. Each has a token label, so a retry first looks for the
	// sandbox the lost answer was about.
	token := randomID()
	labels[labelCreateToken] = token
	body := createSandboxDTO{Snapshot: d.cfg.Snapshot, Env: spec.Env, Labels: labels, NetworkBlockAll: block, Target: d.cfg.Target, CPU: cpu, Memory: mem, Disk: disk}
	created, err := d.create(ctx, body, token)
	if err != nil {
		return nil, err
	}
	if !validID(created.ID) {
		// It goes on the toolbox's command line, which has no escapes.
		return nil, fmt.Errorf("daytona create sandbox: Daytona answered the id %q, which is not a plain id", created.ID)
	}
	sb := &sandbox{d: d, id: created.ID}
	if err := sb.setUp(ctx, spec.WorkingDirectory); err != nil {
		// A sandbox that fails to start is not left behind.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		sb.Delete(dctx)
		return nil, err
	}
	return sb, nil
}

// labelCreateToken labels a sandbox with its create call's token.
const labelCreateToken = "fabro.create_token"

// create posts a CreateSandbox, retrying a transient failure within the
// bound only after making sure the failed attempt made nothing.
func (d *Driver) create(ctx context.Context, body createSandboxDTO, token string) (sandboxDTO, error) {
	rt := d.cfg.Retry.withDefaults()
	wait := rt.Base
	for attempt := 1; ; attempt++ {
		var created sandboxDTO
		err := d.c.do(ctx, request{op: "create sandbox", method: http.MethodPost, path: "/sandbox", out: &created, body: body, once: true})
		var ae *apiError
		if err == nil || attempt >= rt.Attempts || !(errors.Is(err, driver.ErrUnavailable) || errors.As(err, &ae) && ae.status >= 500) {
			return created, err
		}
		var list []sandboxDTO
		q := url.Values{"labels": {mustJSON(map[string]string{labelCreateToken: token})}}
		if lerr := d.c.do(ctx, request{op: "list sandboxes", method: http.MethodGet, path: "/sandbox", query: q, out: &list}); lerr != nil {
			// Whether the failed attempt made a sandbox is unknown: creating
			// again could make a second one. The owner label lets the next
			// start's sweep remove a sandbox made but never recorded.
			return sandboxDTO{}, err
		}
		for _, sb := range list {
			if sb.Labels[labelCreateToken] == token {
				return sb, nil
			}
		}
		t := time.NewTimer(min(wait, rt.Max))
		select {
		case <-ctx.Done():
			t.Stop()
			return sandboxDTO{}, ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
}

// Reopen implements driver.Reopener: the sandbox is looked up again by the
// label naming the service's id.
func (d *Driver) Reopen(ctx context.Context, spec driver.Spec, info driver.Info) (driver.Sandbox, error) {
	var list []sandboxDTO
	q := url.Values{"labels": {mustJSON(map[string]string{LabelSandboxID: spec.ID})}}
	if err := d.c.do(ctx, request{op: "list sandboxes", method: http.MethodGet, path: "/sandbox", query: q, out: &list}); err != nil {
		return nil, err
	}
	for _, s := range list {
		if s.Labels[LabelSandboxID] != spec.ID {
			continue
		}
		if !validID(s.ID) {
			continue
		}
		sb := &sandbox{d: d, id: s.ID}
		if err := sb.setUp(ctx, info.WorkingDirectory); err != nil {
			return nil, err
		}
		return sb, nil
	}
	return nil, &goneError{id: "labelled " + spec.ID, state: "gone", reason: "Daytona lists no sandbox with that label"}
}

// validID: Daytona's ids are UUIDs; letters, digits, '-' and '_' only.
func validID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// sandbox is one Daytona sandbox.
type sandbox struct {
	d    *Driver
	id   string
	info driver.Info
	dir  string // the helper's directory in the sandbox
	rg   bool   // the sandbox has ripgrep
}

var _ driver.Checker = (*sandbox)(nil)

func (s *sandbox) Info() driver.Info { return s.info }

// setUp waits for the sandbox to run, uploads the helper and learns the
// sandbox's root: the given directory, else Daytona's project directory.
func (s *sandbox) setUp(ctx context.Context, workdir string) error {
	if err := s.started(ctx); err != nil {
		return err
	}
	s.dir = "/tmp/.fabro-" + s.id
	if err := s.upload(ctx, s.dir+"/helper.pl", helperScript); err != nil {
		return err
	}
	if workdir == "" {
		var pd struct {
			Dir string `json:"dir"`
		}
		if err := s.d.c.do(ctx, request{op: "project dir", method: http.MethodGet, path: s.toolbox("/project-dir"), out: &pd, notFound: s.gone()}); err != nil {
			return err
		}
		workdir = pd.Dir
	}
	var init struct {
		Dir      string `json:"dir"`
		Platform string `json:"platform"`
		OS       string `json:"os"`
		RG       int    `json:"rg"`
	}
	if err := s.helper(ctx, map[string]any{"op": "init", "dir": workdir}, &init); err != nil {
		return err
	}
	s.rg = init.RG == 1
	s.info = driver.Info{
		Capabilities: s.d.Capabilities(), Platform: init.Platform, OSVersion: init.OS,
		WorkingDirectory: init.Dir, RootDirectory: init.Dir, ManagedWorkspace: true,
	}
	return nil
}

func (s *sandbox) toolbox(p string) string {
	return "/toolbox/" + url.PathEscape(s.id) + "/toolbox" + p
}

func (s *sandbox) gone() error {
	return &goneError{id: s.id, state: "gone", reason: "Daytona no longer knows it"}
}

// state reads the sandbox's state.
func (s *sandbox) state(ctx context.Context) (sandboxDTO, error) {
	var sb sandboxDTO
	err := s.d.c.do(ctx, request{op: "get sandbox", method: http.MethodGet, path: "/sandbox/" + url.PathEscape(s.id), out: &sb, notFound: s.gone()})
	return sb, err
}

// started waits, within StartTimeout, for the sandbox to be started,
// starting it if it stopped; a failed or destroyed one is gone.
func (s *sandbox) started(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.d.cfg.StartTimeout)
	defer cancel()
	wait := s.d.cfg.PollInterval
	startSent := false
	for {
		st, err := s.state(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%w: the Daytona sandbox %s did not start within %s", driver.ErrUnavailable, s.id, s.d.cfg.StartTimeout)
			}
			return err
		}
		switch st.State {
		case "started":
			return nil
		case "error", "build_failed", "destroyed", "destroying":
			return &goneError{id: s.id, state: st.State, reason: st.ErrorReason}
		case "stopped", "archived":
			if !startSent {
				if err := s.d.c.do(ctx, request{op: "start sandbox", method: http.MethodPost, path: "/sandbox/" + url.PathEscape(s.id) + "/start", notFound: s.gone()}); err != nil {
					return err
				}
				startSent = true
			}
		}
		// creating, starting, restoring, pulling_snapshot and the like:
		// still on its way.
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: the Daytona sandbox %s did not start within %s (state %s)", driver.ErrUnavailable, s.id, s.d.cfg.StartTimeout, st.State)
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// Check implements driver.Checker: a sandbox Daytona reports failed or
// destroyed, or no longer knows, is gone; a stopped one is started again.
func (s *sandbox) Check(ctx context.Context) error { return s.started(ctx) }

// Delete implements driver.Sandbox; a sandbox Daytona no longer knows is
// already deleted.
func (s *sandbox) Delete(ctx context.Context) error {
	err := s.d.c.do(ctx, request{op: "delete sandbox", method: http.MethodDelete, path: "/sandbox/" + url.PathEscape(s.id),
		query: url.Values{"force": {"true"}}})
	if ae, ok := err.(*apiError); ok && ae.status == http.StatusNotFound {
		return nil
	}
	return err
}

// call makes a toolbox call. Daytona's toolbox answers a sandbox that is
// not running (stopped by its auto-stop, still starting, archived) with a
// 400 "Is the Sandbox started?", a 404 or a 502 (daytonaio/daytona#4142,
// #4632): on any of those the sandbox's state is read, and one that is not
// started is waited for, started, or found failed, and the call made again,
// once.
func (s *sandbox) call(ctx context.Context, r request) error {
	err := s.d.c.do(ctx, r)
	var ae *apiError
	if !errors.As(err, &ae) || !slices.Contains([]int{400, 404, 409, 502, 503}, ae.status) {
		return err
	}
	if r.once && (ae.status == 502 || ae.status == 503) {
		// A gateway error does not say the call did not run: a command or
		// a write is not repeated on it, even if the sandbox then stopped.
		return err
	}
	st, serr := s.state(ctx)
	if serr != nil {
		return serr
	}
	if st.State == "started" {
		return err
	}
	if serr := s.started(ctx); serr != nil {
		return serr
	}
	return s.d.c.do(ctx, r)
}

// upload writes data to path in the sandbox (files/upload, multipart).
func (s *sandbox) upload(ctx context.Context, path string, data []byte) error {
	return s.call(ctx, request{op: "upload", method: http.MethodPost, path: s.toolbox("/files/upload"),
		query: url.Values{"path": {path}}, body: &multipartBody{field: "file", name: "file", data: data}, notFound: s.gone()})
}

// executeDTO and executeResultDTO are Daytona's ExecuteRequest and
// ExecuteResponse.
type executeDTO struct {
	Command string  `json:"command"`
	Timeout float64 `json:"timeout,omitempty"` // seconds
}

type executeResultDTO struct {
	ExitCode float64 `json:"exitCode"`
	Result   string  `json:"result"`
}

// helperErr is the helper's failure answer.
type helperErr struct {
	Err string `json:"err"`
	Msg string `json:"msg"`
}

// maxInlineRequest is how large a request may be inline on the command
// line (one argument is at most 128 KiB); larger ones are uploaded.
const maxInlineRequest = 96 << 10

// helper runs one request through the helper and decodes its answer into
// out. timeout is how long the toolbox may let it run.
func (s *sandbox) helper(ctx context.Context, req map[string]any, out any) error {
	return s.helperFor(ctx, req, out, 60*time.Second)
}

func (s *sandbox) helperFor(ctx context.Context, req map[string]any, out any, timeout time.Duration) error {
	if _, ok := req["root"]; !ok && s.info.RootDirectory != "" {
		req["root"] = s.info.RootDirectory
	}
	raw, err := json.Marshal(req)
	if err != nil {
		return err
	}
	arg := base64.StdEncoding.EncodeToString(raw)
	if len(arg) > maxInlineRequest {
		p := s.dir + "/req-" + randomID()
		if err := s.upload(ctx, p, raw); err != nil {
			return err
		}
		arg = "@" + p
	}
	var res executeResultDTO
	op, _ := req["op"].(string)
	call := request{op: "execute", method: http.MethodPost, path: s.toolbox("/process/execute"),
		body: executeDTO{Command: "perl " + s.dir + "/helper.pl " + arg, Timeout: math.Ceil(timeout.Seconds())}, out: &res, notFound: s.gone(),
		once: !readOnlyOps[op]}
	if err := s.call(ctx, call); err != nil {
		return err
	}
	var he helperErr
	if json.Unmarshal([]byte(res.Result), &he) != nil {
		return fmt.Errorf("%w: daytona: the sandbox's helper did not answer (exit %v): %.300s; the sandbox's snapshot needs perl (with JSON::PP) and bash", driver.ErrUnsupported, res.ExitCode, res.Result)
	}
	if he.Err != "" {
		return helperError(he)
	}
	return json.Unmarshal([]byte(res.Result), out)
}

// readOnlyOps are the helper's operations that are safe to repeat after a
// lost answer; a command, a write, a remove, a rename or a mkdir is not.
var readOnlyOps = map[string]bool{"init": true, "stat": true, "open": true, "list": true, "walk": true, "grep": true, "read": true}

func helperError(he helperErr) error {
	kinds := map[string]error{
		"not_found": driver.ErrNotFound, "escapes": driver.ErrPathEscapes, "is_dir": driver.ErrIsDirectory,
		"not_dir": driver.ErrNotDirectory, "not_empty": driver.ErrNotEmpty, "exists": driver.ErrExists,
		"invalid": driver.ErrInvalid, "no_bash": driver.ErrBashMissing,
	}
	if k, ok := kinds[he.Err]; ok {
		return fmt.Errorf("%w: %s", k, he.Msg)
	}
	return fmt.Errorf("daytona: in the sandbox: %s", he.Msg)
}
