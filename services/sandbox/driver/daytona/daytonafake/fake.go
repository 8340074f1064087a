// Package daytonafake is a stand-in for Daytona's cloud, for tests: an
// http.Handler speaking the part of Daytona's published OpenAPI description
// the driver uses, with its paths, JSON shapes, states, status codes and
// error bodies (ApiErrorResponseDto):
//
//	GET    /sandbox                      listSandboxes (labels: JSON filter)
//	POST   /sandbox                      createSandbox (CreateSandbox → Sandbox)
//	GET    /sandbox/{id}                 getSandbox
//	DELETE /sandbox/{id}?force=          deleteSandbox
//	POST   /sandbox/{id}/start           startSandbox
//	POST   /sandbox/{id}/stop            stopSandbox
//	GET    /toolbox/{id}/toolbox/project-dir
//	POST   /toolbox/{id}/toolbox/process/execute   (ExecuteRequest → ExecuteResponse)
//	POST   /toolbox/{id}/toolbox/files/upload?path= (multipart, field "file")
//	GET    /toolbox/{id}/toolbox/files/download?path=
//	GET    /toolbox/{id}/toolbox/files/info?path=   (FileInfo)
//	DELETE /toolbox/{id}/toolbox/files?path=&recursive=
//
// A sandbox is a directory on this host, and its commands run on this host
// as Daytona's daemon runs them: the command split on spaces and quotes
// (no shell), in the sandbox's directory, stdout and stderr merged, killed
// at the timeout (default 360 s) with 408. Sandboxes go creating → starting
// → started as they are polled. Faults (a status for the next N calls),
// states (error, build_failed) and disappearances can be injected.
package daytonafake

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Server is the fake. Its zero value is not usable; see New.
type Server struct {
	key  string
	root string

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	faults    []*fault
	calls     map[string]int // "METHOD /path-pattern" -> count
}

type sandbox struct {
	ID     string            `json:"id"`
	Name   string            `json:"name"`
	Org    string            `json:"organizationId"`
	User   string            `json:"user"`
	Env    map[string]string `json:"env"`
	Labels map[string]string `json:"labels"`
	Public bool              `json:"public"`
	Target string            `json:"target"`
	CPU    float64           `json:"cpu"`
	Memory float64           `json:"memory"`
	Disk   float64           `json:"disk"`
	State  string            `json:"state"`
	Reason string            `json:"errorReason,omitempty"`

	NetworkBlockAll bool `json:"networkBlockAll"`

	held bool   // the state does not move on as it is polled
	dir  string // the sandbox's directory on this host
	home string // its project directory
}

type fault struct {
	method, suffix string
	status, left   int
	retryAfter     string
	after          bool // the call is carried out, then its answer lost
}

// New returns a fake accepting the API key key, keeping its sandboxes below
// root.
func New(key, root string) *Server {
	return &Server{key: key, root: root, sandboxes: map[string]*sandbox{}, calls: map[string]int{}}
}

// Fail makes the next n calls whose method is method (any if "") and whose
// path ends with suffix answer status, with Daytona's error body, and the
// Retry-After header if retryAfter is not empty.
func (s *Server) Fail(method, suffix string, status, n int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{method: method, suffix: suffix, status: status, left: n, retryAfter: retryAfter})
}

// FailAfter is Fail for calls that are carried out before the failure is
// answered: a proxy's 502 after the API made the sandbox or ran the
// command.
func (s *Server) FailAfter(method, suffix string, status, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{method: method, suffix: suffix, status: status, left: n, after: true})
}

// SetState puts a sandbox in a state, as Daytona would after a failure.
func (s *Server) SetState(id, state, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		sb.State, sb.Reason = state, reason
	}
}

// Hold keeps a sandbox in a state however often it is polled, as a
// sandbox stuck starting would be.
func (s *Server) Hold(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		sb.State, sb.held = state, true
	}
}

// Vanish removes a sandbox behind the client's back.
func (s *Server) Vanish(id string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	delete(s.sandboxes, id)
	s.mu.Unlock()
	if sb != nil {
		os.RemoveAll(sb.dir)
		os.RemoveAll(helperDir(id))
	}
}

// Calls counts the calls made to a route, such as "POST /sandbox".
func (s *Server) Calls(route string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[route]
}

// Sandboxes lists the ids of the sandboxes that exist.
func (s *Server) Sandboxes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id := range s.sandboxes {
		out = append(out, id)
	}
	return out
}

// Get returns a copy of a sandbox's record.
func (s *Server) Get(id string) (state string, labels map[string]string, cpu, memoryGB float64, blockNet, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return "", nil, 0, 0, false, false
	}
	return sb.State, sb.Labels, sb.CPU, sb.Memory, sb.NetworkBlockAll, true
}

// DiskGB returns the disk a sandbox was given, in GB (Daytona's default
// is 3).
func (s *Server) DiskGB(id string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb.Disk
	}
	return 0
}

// helperDir is the host directory standing for the sandbox's /tmp/.fabro-ID.
func helperDir(id string) string { return "/tmp/.fabro-" + id }

// apiError writes Daytona's ApiErrorResponseDto.
func apiError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"statusCode": status, "source": "api", "code": code, "message": msg,
		"timestamp": time.Now().UTC().Format(time.RFC3339Nano), "path": r.URL.Path, "method": r.Method,
	})
}

var codeOf = map[int]string{400: "BAD_REQUEST", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND", 408: "BAD_REQUEST",
	409: "CONFLICT", 429: "RATE_LIMIT_EXCEEDED", 500: "INTERNAL_SERVER_ERROR", 502: "INTERNAL_SERVER_ERROR", 503: "INTERNAL_SERVER_ERROR"}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	route := r.Method + " /" + parts[0]
	switch {
	case parts[0] == "sandbox" && len(parts) == 2:
		route += "/{id}"
	case parts[0] == "sandbox" && len(parts) == 3:
		route += "/{id}/" + parts[2]
	case parts[0] == "toolbox" && len(parts) >= 4:
		route += "/{id}/toolbox/" + strings.Join(parts[3:], "/")
	}
	s.mu.Lock()
	s.calls[route]++
	if r.Header.Get("Authorization") != "Bearer "+s.key {
		s.mu.Unlock()
		apiError(w, r, http.StatusUnauthorized, "UNAUTHORIZED", "Invalid credentials")
		return
	}
	for _, f := range s.faults {
		if f.left > 0 && (f.method == "" || f.method == r.Method) && strings.HasSuffix(r.URL.Path, f.suffix) {
			f.left--
			s.mu.Unlock()
			if f.after {
				s.route(httptest.NewRecorder(), r, parts)
			}
			if f.retryAfter != "" {
				w.Header().Set("Retry-After", f.retryAfter)
			}
			apiError(w, r, f.status, codeOf[f.status], http.StatusText(f.status))
			return
		}
	}
	s.mu.Unlock()
	s.route(w, r, parts)
}

func (s *Server) route(w http.ResponseWriter, r *http.Request, parts []string) {
	switch {
	case parts[0] == "sandbox" && len(parts) == 1 && r.Method == http.MethodGet:
		s.list(w, r)
	case parts[0] == "sandbox" && len(parts) == 1 && r.Method == http.MethodPost:
		s.create(w, r)
	case parts[0] == "sandbox" && len(parts) == 2 && r.Method == http.MethodGet:
		s.withSandbox(w, r, parts[1], func(sb *sandbox) {
			// Each poll moves a sandbox on its way up by one state.
			switch {
			case sb.held:
			case sb.State == "creating":
				sb.State = "starting"
			case sb.State == "starting":
				sb.State = "started"
			}
			writeJSON(w, sb)
		})
	case parts[0] == "sandbox" && len(parts) == 2 && r.Method == http.MethodDelete:
		s.remove(w, r, parts[1])
	case parts[0] == "sandbox" && len(parts) == 3 && r.Method == http.MethodPost && parts[2] == "start":
		s.withSandbox(w, r, parts[1], func(sb *sandbox) {
			if sb.State == "stopped" || sb.State == "archived" {
				sb.State = "starting"
			}
			writeJSON(w, sb)
		})
	case parts[0] == "sandbox" && len(parts) == 3 && r.Method == http.MethodPost && parts[2] == "stop":
		s.withSandbox(w, r, parts[1], func(sb *sandbox) { sb.State = "stopped"; w.WriteHeader(http.StatusOK) })
	case parts[0] == "toolbox" && len(parts) >= 4 && parts[2] == "toolbox":
		s.toolbox(w, r, parts[1], strings.Join(parts[3:], "/"))
	default:
		apiError(w, r, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("Cannot %s %s", r.Method, r.URL.Path))
	}
}

func (s *Server) withSandbox(w http.ResponseWriter, r *http.Request, id string, fn func(*sandbox)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		apiError(w, r, http.StatusNotFound, "SANDBOX_NOT_FOUND", fmt.Sprintf("Sandbox with ID or name %s not found", id))
		return
	}
	fn(sb)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	var want map[string]string
	if l := r.URL.Query().Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", "labels must be a JSON object")
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*sandbox{}
	for _, sb := range s.sandboxes {
		match := true
		for k, v := range want {
			if sb.Labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, sb)
		}
	}
	writeJSON(w, out)
}

// createRequest is CreateSandbox; unknown fields are refused, as the
// generated clients' strict decoding would notice a shape the API lacks.
type createRequest struct {
	Snapshot            string            `json:"snapshot"`
	User                string            `json:"user"`
	Env                 map[string]string `json:"env"`
	Labels              map[string]string `json:"labels"`
	Public              bool              `json:"public"`
	NetworkBlockAll     bool              `json:"networkBlockAll"`
	NetworkAllowList    string            `json:"networkAllowList"`
	Class               string            `json:"class"`
	Target              string            `json:"target"`
	CPU                 int               `json:"cpu"`
	GPU                 int               `json:"gpu"`
	Memory              int               `json:"memory"`
	Disk                int               `json:"disk"`
	AutoStopInterval    int               `json:"autoStopInterval"`
	AutoArchiveInterval int               `json:"autoArchiveInterval"`
	AutoDeleteInterval  int               `json:"autoDeleteInterval"`
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", "invalid CreateSandbox: "+err.Error())
		return
	}
	if req.CPU < 0 || req.Memory < 0 || req.Disk < 0 {
		apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", "cpu, memory and disk must not be negative")
		return
	}
	id := newID()
	dir := filepath.Join(s.root, id)
	home := filepath.Join(dir, "home", "daytona")
	if err := os.MkdirAll(home, 0o755); err != nil {
		apiError(w, r, http.StatusInternalServerError, "INTERNAL_SERVER_ERROR", "cannot create the sandbox")
		return
	}
	sb := &sandbox{ID: id, Name: id, Org: "fake-org", User: "daytona", Env: req.Env, Labels: req.Labels, Target: req.Target,
		CPU: float64(max(req.CPU, 1)), Memory: float64(max(req.Memory, 1)), Disk: float64(cmp.Or(req.Disk, 3)), State: "creating",
		NetworkBlockAll: req.NetworkBlockAll, dir: dir, home: home}
	if sb.Env == nil {
		sb.Env = map[string]string{}
	}
	if sb.Labels == nil {
		sb.Labels = map[string]string{}
	}
	if sb.Target == "" {
		sb.Target = "us"
	}
	s.mu.Lock()
	s.sandboxes[id] = sb
	s.mu.Unlock()
	writeJSON(w, sb)
}

func (s *Server) remove(w http.ResponseWriter, r *http.Request, id string) {
	if r.URL.Query().Get("force") == "" {
		apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", "force is required")
		return
	}
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		apiError(w, r, http.StatusNotFound, "SANDBOX_NOT_FOUND", fmt.Sprintf("Sandbox with ID or name %s not found", id))
		return
	}
	s.Vanish(id)
	w.WriteHeader(http.StatusOK)
}

// inside reports whether p is a path the fake sandbox owns on this host.
func (sb *sandbox) inside(p string) bool {
	p = filepath.Clean(p)
	for _, top := range []string{sb.dir, helperDir(sb.ID)} {
		if p == top || strings.HasPrefix(p, top+"/") {
			return true
		}
	}
	return false
}

func (s *Server) toolbox(w http.ResponseWriter, r *http.Request, id, op string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	var state string
	if sb != nil {
		state = sb.State
	}
	s.mu.Unlock()
	if sb == nil {
		apiError(w, r, http.StatusNotFound, "SANDBOX_NOT_FOUND", fmt.Sprintf("Sandbox with ID or name %s not found", id))
		return
	}
	// What Daytona's toolbox proxy answers for a sandbox that is not
	// running (daytonaio/daytona#4142, #4632).
	switch state {
	case "started":
	case "archived":
		apiError(w, r, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("not found: sandbox container not found: not found: failed to inspect sandbox container %s: Error response from daemon: No such container: %s", id, id))
		return
	default:
		apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", "bad request: failed to resolve container IP after 3 attempts: no IP address found. Is the Sandbox started?")
		return
	}
	p := r.URL.Query().Get("path")
	needPath := op == "files/upload" || op == "files/download" || op == "files" || op == "files/info"
	if needPath && (p == "" || !filepath.IsAbs(p) || !sb.inside(p)) {
		apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", "path is required, absolute, inside the sandbox")
		return
	}
	switch {
	case op == "project-dir" && r.Method == http.MethodGet:
		writeJSON(w, map[string]string{"dir": sb.home})
	case op == "process/execute" && r.Method == http.MethodPost:
		s.execute(w, r, sb)
	case op == "files/upload" && r.Method == http.MethodPost:
		f, _, err := r.FormFile("file")
		if err != nil {
			apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", err.Error())
			return
		}
		defer f.Close()
		os.MkdirAll(filepath.Dir(p), 0o755)
		out, err := os.Create(p)
		if err != nil {
			apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", err.Error())
			return
		}
		_, err = io.Copy(out, f)
		out.Close()
		if err != nil {
			apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", err.Error())
			return
		}
		w.WriteHeader(http.StatusOK)
	case op == "files/download" && r.Method == http.MethodGet:
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			apiError(w, r, http.StatusNotFound, "NOT_FOUND", "file not found")
			return
		} else if err != nil {
			apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", err.Error())
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		io.Copy(w, f)
	case op == "files/info" && r.Method == http.MethodGet:
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			apiError(w, r, http.StatusNotFound, "NOT_FOUND", err.Error())
			return
		} else if err != nil {
			apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", err.Error())
			return
		}
		writeJSON(w, map[string]any{"name": fi.Name(), "isDir": fi.IsDir(), "size": fi.Size(), "modTime": fi.ModTime().Format(time.RFC3339Nano),
			"mode": fi.Mode().String(), "permissions": fmt.Sprintf("%04o", fi.Mode().Perm()), "owner": "1000", "group": "1000"})
	case op == "files" && r.Method == http.MethodDelete:
		fi, err := os.Lstat(p)
		if err != nil {
			apiError(w, r, http.StatusNotFound, "NOT_FOUND", err.Error())
			return
		}
		if fi.IsDir() && r.URL.Query().Get("recursive") != "true" {
			apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", "cannot delete directory without recursive flag")
			return
		}
		if err := os.RemoveAll(p); err != nil {
			apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, r, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("Cannot %s %s", r.Method, r.URL.Path))
	}
}

// execute runs a command as Daytona's daemon does.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req struct {
		Command string   `json:"command"`
		Cwd     *string  `json:"cwd"`
		Timeout *float64 `json:"timeout"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Command == "" {
		apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", "command is required")
		return
	}
	args := parseCommand(req.Command)
	if len(args) == 0 {
		apiError(w, r, http.StatusBadRequest, "BAD_REQUEST", "empty command")
		return
	}
	timeout := 360 * time.Second
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout * float64(time.Second))
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = sb.home
	if req.Cwd != nil {
		cmd.Dir = *req.Cwd
	}
	env := os.Environ()
	for k, v := range sb.Env {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		writeJSON(w, map[string]any{"exitCode": -1, "result": err.Error()})
		return
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		cmd.Process.Kill()
		<-done
		apiError(w, r, http.StatusRequestTimeout, "BAD_REQUEST", "command execution timeout")
		return
	}
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	writeJSON(w, map[string]any{"exitCode": code, "result": out.String()})
}

// parseCommand splits a command as Daytona's daemon does: on spaces, with
// ' and " quoting and no escapes.
func parseCommand(command string) []string {
	var args []string
	var cur strings.Builder
	var quote rune
	for _, r := range command {
		switch {
		case (r == '"' || r == '\'') && quote == 0:
			quote = r
		case r == quote:
			quote = 0
		case r == ' ' && quote == 0:
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}
