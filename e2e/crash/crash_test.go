// Package crash_test is the crash harness: it runs a scripted prompt
// (file writes, shell commands, a subagent) against `fabro serve` as a
// separate process, kills it with SIGKILL at a moment drawn from a seeded
// RNG, starts it again on the same data directory, waits for the prompt
// to finish, and checks what a crash must never break (round.check). Other
// rounds run fabro serve on an external nats-server and kill that instead
// (restarted a second later on its port and store), and others kill it
// while a longer prompt compacts its context before every turn.
//
// The seed is printed; FABRO_CRASH_SEED=<n> replays a run, and
// FABRO_CRASH_ROUNDS=<n> sets the number of kill points of fabro serve (30,
// 3 with -short; a fifth as many for NATS and for compaction). Every
// invariant fails the test, a prompt that does not finish too.
package crash_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	"github.com/fabro-sh/fabro-go/platform/grpcclient"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

var fabroBin, natsBin string

// startupLimit bounds a start of fabro serve (it takes about a second).
const startupLimit = 20 * time.Second

// errRestart prefixes the failure of a round whose server did not come
// back or whose prompt did not finish.
const errRestart = "restart"

// TestMain builds the fabro binary once (from cmd/fabro, its own module).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fabro-crash-")
	if err != nil {
		panic(err)
	}
	fabroBin = filepath.Join(dir, "fabro")
	build := exec.Command("go", "build", "-o", fabroBin, ".")
	build.Dir = filepath.Join("..", "..", "cmd", "fabro")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build fabro: %v\n%s", err, out)
		os.Exit(1)
	}
	// nats-server, for the rounds against an external NATS (built from the
	// module cache, as the cluster images are).
	natsBin = filepath.Join(dir, "nats-server")
	build = exec.Command("go", "build", "-o", natsBin, "github.com/nats-io/nats-server/v2")
	build.Dir = filepath.Join("..", "..", "services", "agent")
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build nats-server: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// marker is in every command the script runs, so that a process of a
// killed incarnation can be found by its command line.
const marker = "fabro-crash-harness"

// The prompt's script. Each request is answered from what the
// conversation already holds, so a turn replayed after a restart gets
// the same answer. The markers checked are computed by the commands
// ($((...))), so they appear in a request only once a command ran.
const promptText = "CRASH-HARNESS-PROMPT: build all.txt"

// carried are the phrases the script answers by: a summary keeps each
// occurrence in order, so a compacted conversation is answered as the
// full one.
var carried = regexp.MustCompile(`\(compacting\)|4-pad|25-beta|started on the task|has no subagents|SUBRESULT-OK|42-all|9-gamma|CRASH-HARNESS-PROMPT|SUBTASK`)

// compactPrompt runs padTurns commands before the script's own turns, with
// the context compacted before every turn, so kills land in compactions.
const (
	compactPrompt = "CRASH-HARNESS-PROMPT (compacting): build all.txt"
	padTurns      = 7
)

func script(r fakeprovider.Request) fakeprovider.Turn {
	body := string(r.Body)
	if strings.Contains(body, "You are summarizing a coding session") { // a compaction
		return fakeprovider.Turn{Text: "Progress: " + strings.Join(carried.FindAllString(body, -1), "; ")}
	}
	// Each command leaves a sleeper behind, named with the marker, that
	// outlives a restart unless the sandbox service kills what its
	// killed incarnation started (a command's end kills it otherwise).
	shell := func(id, cmd string) fakeprovider.ToolCall {
		b, _ := json.Marshal(map[string]any{"command": ": " + marker + "; (exec -a " + marker + "-sleeper sleep 60) >/dev/null 2>&1 & " + cmd})
		return fakeprovider.ToolCall{ID: id, Name: "shell", Arguments: string(b)}
	}
	if !strings.Contains(body, "CRASH-HARNESS-PROMPT") { // the subagent
		if strings.Contains(body, "9-gamma") {
			return fakeprovider.Turn{Text: "SUBRESULT-OK"}
		}
		return fakeprovider.Turn{Text: "Writing c.", ToolCalls: []fakeprovider.ToolCall{
			shell("toolu_c", `sleep 0.4 && echo gamma > c.txt && echo "$((3*3))-gamma"`)}}
	}
	if strings.Contains(body, "(compacting)") && strings.Count(body, "4-pad") < padTurns && !strings.Contains(body, "25-beta") {
		return fakeprovider.Turn{Text: "Padding.", ToolCalls: []fakeprovider.ToolCall{
			shell(fmt.Sprintf("toolu_pad%d", strings.Count(body, "4-pad")), `echo "$((2*2))-pad"`)}}
	}
	switch {
	case strings.Contains(body, "42-all"):
		return fakeprovider.Turn{Text: "All done."}
	case strings.Contains(body, "SUBRESULT-OK"):
		return fakeprovider.Turn{Text: "Joining.", ToolCalls: []fakeprovider.ToolCall{
			shell("toolu_all", `cat a.txt b.txt c.txt > all.txt && echo "$((6*7))-all"`)}}
	case strings.LastIndex(body, "has no subagents") > strings.LastIndex(body, "started on the task"):
		// The subagent was lost (a restart while it ran): start it again,
		// as a model would.
		return fakeprovider.Turn{Text: "Delegating c again.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_respawn", Name: "spawn_agent",
			Arguments: `{"task":"SUBTASK: write c.txt"}`}}}
	case strings.Contains(body, "started on the task"): // spawn_agent's answer
		return fakeprovider.Turn{Text: "Waiting for it.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_wait", Name: "wait", Arguments: `{}`}}}
	case strings.Contains(body, "25-beta"):
		return fakeprovider.Turn{Text: "Delegating c.", ToolCalls: []fakeprovider.ToolCall{{ID: "toolu_spawn", Name: "spawn_agent",
			Arguments: `{"task":"SUBTASK: write c.txt"}`}}}
	}
	return fakeprovider.Turn{Text: strings.Repeat("Starting with a and b. ", 8), ChunkRunes: 4, ChunkDelay: 10 * time.Millisecond,
		ToolCalls: []fakeprovider.ToolCall{
			{ID: "toolu_a", Name: "write_file", Arguments: `{"file_path":"a.txt","content":"alpha\n"}`},
			shell("toolu_b", `sleep 0.6 && echo beta > b.txt && echo "$((5*5))-beta"`),
		}}
}

// serveProc is one incarnation of `fabro serve`.
type serveProc struct {
	cmd      *exec.Cmd
	grpcAddr string
	natsURL  string
	natsKey  string // the subscriber's nkey seed file
	logs     *bytes.Buffer
	done     chan struct{} // closed once the process is reaped
}

// startServe starts fabro serve on dataDir, with its NATS embedded or, when
// natsURL is set, on that external server; flags are more of serve's.
func startServe(t *testing.T, dataDir string, env []string, natsURL string, flags ...string) *serveProc {
	t.Helper()
	nats := []string{"-nats-listen", "127.0.0.1:-1"}
	if natsURL != "" {
		nats = []string{"-nats-url", natsURL}
	}
	nats = append(nats, flags...)
	cmd := exec.Command(fabroBin, append([]string{"serve", "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0",
		"-log-format", "json", "-log-level", "info"}, nats...)...)
	cmd.Env = append(os.Environ(), append([]string{"FABRO_DATA_DIR=" + dataDir}, env...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serveProc{cmd: cmd, logs: &bytes.Buffer{}, done: make(chan struct{}), natsURL: natsURL}
	// A server that does not come up within startupLimit is killed, so the
	// scan below ends and the round fails with its logs.
	stuck := time.AfterFunc(startupLimit, func() { _ = cmd.Process.Kill() })
	defer stuck.Stop()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		s.logs.Write(append(sc.Bytes(), '\n'))
		var line struct {
			Msg      string `json:"msg"`
			GRPCAddr string `json:"grpc_addr"`
			NATSURL  string `json:"nats_url"`
			NKeyFile string `json:"subscriber_nkey_file"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		if line.NATSURL != "" {
			s.natsURL, s.natsKey = line.NATSURL, line.NKeyFile
		}
		if line.Msg == "server started" {
			s.grpcAddr = line.GRPCAddr
			break
		}
	}
	if s.grpcAddr == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("%s: fabro serve did not start within %s:\n%s", errRestart, startupLimit, s.logs)
	}
	go func() {
		_, _ = io.Copy(s.logs, stderr)
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("fabro serve (pid %d) logs:\n%s", cmd.Process.Pid, s.logs)
		}
	})
	return s
}

func (s *serveProc) client(t *testing.T, dataDir string) agentv1.AgentServiceClient {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(dataDir, "auth", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpcclient.New(s.grpcAddr, grpcclient.Options{Token: grpcclient.Static(strings.TrimSpace(string(tok)))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return agentv1.NewAgentServiceClient(conn)
}

// natsProc is an external nats-server with JetStream, restartable on the
// same port and store.
type natsProc struct {
	port, store string
	cmd         *exec.Cmd
	logs        *bytes.Buffer
}

func startNATS(t *testing.T) *natsProc {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	n := &natsProc{port: port, store: t.TempDir(), logs: &bytes.Buffer{}}
	n.start(t)
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			t.Logf("nats-server logs:\n%s", n.logs)
		}
	})
	return n
}

func (n *natsProc) url() string { return "nats://127.0.0.1:" + n.port }

// start runs nats-server and waits until it takes connections.
func (n *natsProc) start(t *testing.T) {
	t.Helper()
	n.cmd = exec.Command(natsBin, "-js", "-a", "127.0.0.1", "-p", n.port, "-sd", n.store)
	n.cmd.Stdout, n.cmd.Stderr = n.logs, n.logs
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(startupLimit)
	for {
		nc, err := nats.Connect(n.url(), nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: nats-server did not start: %v\n%s", errRestart, err, n.logs)
		}
		time.Sleep(50 * time.Millisecond) // a process starting: nothing to await from here
	}
}

func (n *natsProc) kill() {
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
	}
}

// target is the process a round kills.
type target int

const (
	killServe target = iota // fabro serve, on its embedded NATS
	killNATS                // the external nats-server fabro serve uses
	// fabro serve, running compactPrompt with the context compacted
	// before every turn (a threshold of 1%).
	killCompacting
)

// round is one run of the prompt, killed after killAfter (never when
// negative).
type round struct {
	ws, data string
	env      []string
	root     string                           // the prompted session
	sessions map[string][]*agentv1.AgentEvent // every session's log, from sequence 1
	ids      map[string][]string              // every session's stored message ids, in stream order
	took     time.Duration                    // from the prompt's start to its end (no kill)
	killedAt string                           // the last event before the kill
	orphans  []string                         // processes of the killed incarnation alive after the restart
}

func runRound(t *testing.T, fakeURL string, killAfter time.Duration, what target) *round {
	t.Helper()
	var ext *natsProc
	natsURL := ""
	if what == killNATS {
		ext = startNATS(t)
		natsURL = ext.url()
	}
	r := &round{ws: t.TempDir(), data: t.TempDir()}
	overlay := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(overlay, fakeprovider.CatalogOverlay(fakeURL), 0o600); err != nil {
		t.Fatal(err)
	}
	r.env = []string{"FABRO_LLM_CATALOG_OVERLAY=" + overlay, "ANTHROPIC_API_KEY=test-key", "FABRO_SANDBOX_ALLOWED_ROOTS=" + r.ws}
	s := startServe(t, r.data, r.env, natsURL)
	c := s.client(t, r.data)
	opts, text := &agentv1.AgentOptions{Subagents: &agentv1.SubagentOptions{Enabled: true}}, promptText
	if what == killCompacting {
		opts.CompactionThresholdPercent, text = proto.Int32(1), compactPrompt
	}
	created, err := c.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model:           "anthropic/claude-sonnet-4.5",
		Sandbox:         &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local", WorkingDirectory: r.ws}},
		PermissionLevel: agentv1.PermissionLevel_PERMISSION_LEVEL_FULL,
		Options:         opts,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	r.root = id
	start := time.Now()
	started, err := c.StartPrompt(t.Context(), &agentv1.StartPromptRequest{SessionId: id, Text: text})
	if err != nil {
		t.Fatal(err)
	}
	if killAfter >= 0 && what == killNATS {
		// NATS dies under the running prompt and comes back on its port
		// and store after a second: the server waits for it.
		r.killedAt = lastEventBefore(t, c, id, killAfter)
		ext.kill()
		time.Sleep(time.Second) // the outage itself
		ext.start(t)
	} else if killAfter >= 0 {
		last := lastEventBefore(t, c, id, killAfter)
		if err := s.cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		<-s.done
		killed := time.Now()
		r.killedAt = last
		s = startServe(t, r.data, r.env, natsURL)
		r.orphans = awaitNoSurvivors(t, killed)
		c = s.client(t, r.data)
	}
	watch(t, c, id, started.GetPromptId(), time.Minute)
	r.took = time.Since(start)
	r.sessions, r.ids = collect(t, c, s, id)
	return r
}

// lastEventBefore follows the session's events for d and names the last
// one seen: where in the prompt the kill comes.
func lastEventBefore(t *testing.T, c agentv1.AgentServiceClient, id string, d time.Duration) string {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	last := "nothing"
	st, err := c.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1, Follow: true})
	if err != nil {
		return last
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return last
		}
		last = fmt.Sprintf("%d %s", resp.GetEvent().GetSequence(), eventType(resp.GetEvent()))
	}
}

// watch waits until the prompt's prompt_completed is in the log,
// reconnecting while the restarted server comes up.
func watch(t *testing.T, c agentv1.AgentServiceClient, id, promptID string, until time.Duration) {
	t.Helper()
	deadline := time.Now().Add(until)
	var seen []string
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Until(deadline))
		err := func() error {
			st, err := c.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1, Follow: true})
			if err != nil {
				return err
			}
			seen = seen[:0]
			for {
				resp, err := st.Recv()
				if err != nil {
					return err
				}
				ev := resp.GetEvent()
				line := fmt.Sprintf("%d %s", ev.GetSequence(), eventType(ev))
				if c := ev.GetToolCallCompleted(); c != nil {
					line += fmt.Sprintf(" %s %q", c.GetToolCallId(), c.GetOutput())
				}
				seen = append(seen[max(0, len(seen)-30):], line)
				if ev := resp.GetEvent(); ev.GetPromptId() == promptID && ev.GetPromptCompleted() != nil {
					return nil
				}
			}
		}()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("%s: prompt %s did not complete within %s: %v; its session's last events: %v", errRestart, promptID, until, err, seen)
			t.Fatal(msg)
		}
		time.Sleep(100 * time.Millisecond) // a server restarting: nothing to await from here
	}
}

// collect reads the log of the root session and of every subagent, through
// the API (StreamEvents) and raw from the JetStream stream (the message
// ids as stored).
func collect(t *testing.T, c agentv1.AgentServiceClient, s *serveProc, root string) (map[string][]*agentv1.AgentEvent, map[string][]string) {
	t.Helper()
	ids := []string{root}
	list, err := c.ListSessions(t.Context(), &agentv1.ListSessionsRequest{IncludeSubagents: true, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, sess := range list.GetSessions() {
		if sess.GetSessionId() != root {
			ids = append(ids, sess.GetSessionId())
		}
	}
	logs := map[string][]*agentv1.AgentEvent{}
	for _, id := range ids {
		st, err := c.StreamEvents(t.Context(), &agentv1.StreamEventsRequest{SessionId: id, FromSequence: 1})
		if err != nil {
			t.Fatal(err)
		}
		for {
			resp, err := st.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("replay %s: %v", id, err)
			}
			logs[id] = append(logs[id], resp.GetEvent())
		}
	}
	return logs, storedIDs(t, s, ids)
}

// storedIDs reads every message of the sessions from the events stream, as
// a subscriber does, and returns each session's Fabro-Event-Msg-Id list
// (a chunked event's chunks count as one message each, by chunk index).
func storedIDs(t *testing.T, s *serveProc, sessions []string) map[string][]string {
	t.Helper()
	// The ordered consumer's cleanup is refused (a subscriber may not
	// delete consumers; the server drops them once idle): not an error here.
	opts := []nats.Option{nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}
	if s.natsKey != "" { // the embedded server's subscriber (an external one has no auth here)
		opt, err := nats.NkeyOptionFromSeed(s.natsKey)
		if err != nil {
			t.Fatalf("subscriber key %q: %v", s.natsKey, err)
		}
		opts = append(opts, opt)
	}
	nc, err := nats.Connect(s.natsURL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, id := range sessions {
		subject := "fabro.agent.v1.sessions." + id + ".events.>"
		stream, err := js.StreamNameBySubject(t.Context(), subject)
		if err != nil {
			t.Fatalf("events stream: %v", err)
		}
		cons, err := js.OrderedConsumer(t.Context(), stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
		if err != nil {
			t.Fatal(err)
		}
		for {
			batch, err := cons.FetchNoWait(256)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for m := range batch.Messages() {
				n++
				h := m.Headers()
				out[id] = append(out[id], h.Get("Fabro-Event-Msg-Id")+"#"+h.Get("Fabro-Chunk-Index"))
			}
			if batch.Error() != nil {
				t.Fatal(batch.Error())
			}
			if n == 0 {
				break
			}
		}
	}
	return out
}

// survivorGrace bounds how long after its start the restarted server may
// take to kill what the killed one left running.
const survivorGrace = 10 * time.Second

// awaitNoSurvivors waits until no process of the killed incarnation lives
// (or survivorGrace), and returns those still alive.
func awaitNoSurvivors(t *testing.T, killed time.Time) []string {
	t.Helper()
	deadline := time.Now().Add(survivorGrace)
	for {
		left := survivors(t, killed)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond) // a process's death: nothing to await from here
	}
}

// survivors lists the processes running one of the script's commands that
// started before the kill (of the killed incarnation) and still live.
func survivors(t *testing.T, killed time.Time) []string {
	t.Helper()
	boot := bootTime(t)
	tick := 100.0 // USER_HZ: clock ticks per second on Linux
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(marker)) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Field 22 (starttime) counts after the command's closing paren.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 20 {
			continue
		}
		ticks, _ := strconv.ParseFloat(f[19], 64)
		if started := boot.Add(time.Duration(ticks / tick * float64(time.Second))); started.Before(killed) {
			out = append(out, fmt.Sprintf("pid %d: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	return out
}

func bootTime(t *testing.T) time.Time {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "btime "); ok {
			s, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return time.Unix(s, 0)
		}
	}
	t.Fatal("no btime in /proc/stat")
	return time.Time{}
}

func eventType(ev *agentv1.AgentEvent) string {
	fd := ev.ProtoReflect().WhichOneof(ev.ProtoReflect().Descriptor().Oneofs().ByName("event"))
	if fd == nil {
		return "?"
	}
	return string(fd.Name())
}
