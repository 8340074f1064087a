package agent_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/testkit"
	"github.com/fabro-sh/fabro-go/services/agent"
	"github.com/fabro-sh/fabro-go/services/llmgateway/fakeprovider"
)

// runNATSServer is the test binary as an external nats-server:
// FABRO_AGENT_TEST_NATS="<port> <store dir>". It prints "ready" and runs
// until killed.
func runNATSServer(spec string) {
	f := strings.Fields(spec)
	port, _ := strconv.Atoi(f[0])
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: f[1], NoSigs: true, NoLog: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		os.Exit(1)
	}
	fmt.Println("ready")
	ns.WaitForShutdown()
	os.Exit(0)
}

// natsProcess is an external nats-server on a fixed port and store, so it
// can be killed and started again in the same place.
type natsProcess struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startNATSProcess(t *testing.T) *natsProcess {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &natsProcess{t: t, port: l.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
	l.Close()
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *natsProcess) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

func (p *natsProcess) start() {
	p.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("FABRO_AGENT_TEST_NATS=%d %s", p.port, p.dir))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.cmd = cmd
	if sc := bufio.NewScanner(out); !sc.Scan() || sc.Text() != "ready" {
		p.t.Fatalf("nats-server process did not start: %q", sc.Text())
	}
}

// kill sends SIGKILL.
func (p *natsProcess) kill() {
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// slowTurn streams its text as many deltas, one every few milliseconds,
// so NATS can die mid-run.
func slowTurn() fakeprovider.Turn {
	return fakeprovider.Turn{Text: strings.Repeat("word ", 200), ChunkRunes: 5, ChunkDelay: 5 * time.Millisecond}
}

// TestRunSurvivesNATSRestart kills the external nats-server (SIGKILL)
// mid-prompt and starts it again on the same port and store: the run
// pauses, then completes, and the stream holds 1..N exactly once.
func TestRunSurvivesNATSRestart(t *testing.T) {
	np := startNATSProcess(t)
	st := newStack(t, func(c *agent.Config) {
		c.NATSURL = np.url()
		c.Events.AckTimeout, c.Events.OutageLimit = 300*time.Millisecond, time.Minute
	})
	_, sbID := st.workspace(t, nil)
	st.fake.Enqueue(slowTurn())
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	stream, err := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, Text: "talk"})
	if err != nil {
		t.Fatal(err)
	}
	var live []*agentv1.AgentEvent
	restarted := false
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("prompt stream: %v (after %d events)", err, len(live))
		}
		live = append(live, resp.GetEvent())
		if !restarted && len(live) == 20 {
			np.kill()
			// The session goes on producing deltas while NATS is down;
			// the writer holds them, and says so.
			testkit.Eventually(t, 30*time.Second, func() error {
				if !st.logs.logged("session events not acknowledged by NATS; holding them") {
					return errors.New("the writer has not said it holds events while NATS is down")
				}
				return nil
			})
			np.start()
			restarted = true
		}
		if resp.GetEvent().GetPromptCompleted() != nil {
			break
		}
	}
	if !restarted {
		t.Fatal("the prompt ended before NATS was killed")
	}
	checkGapless(t, live, live[0].GetSequence())
	stored := st.streamEvents(t, id, 1)
	checkGapless(t, stored, 1)
	if last := live[len(live)-1].GetSequence(); stored[len(stored)-1].GetSequence() < last {
		t.Fatalf("the stream ends at %d, the prompt at %d", stored[len(stored)-1].GetSequence(), last)
	}
	if n := sessionMsgs(t, np.url(), id); n != uint64(len(stored)) {
		t.Errorf("the stream holds %d messages of the session, want %d (exactly once)", n, len(stored))
	}
}

// TestRunEndsAfterNATSOutageLimit kills NATS for good mid-prompt: the
// session waits out the bound, then ends with an error naming NATS.
func TestRunEndsAfterNATSOutageLimit(t *testing.T) {
	np := startNATSProcess(t)
	st := newStack(t, func(c *agent.Config) {
		c.NATSURL = np.url()
		c.Events.AckTimeout, c.Events.OutageLimit = 200*time.Millisecond, time.Second
	})
	_, sbID := st.workspace(t, nil)
	st.fake.Enqueue(slowTurn())
	created, err := st.agent.CreateSession(t.Context(), &agentv1.CreateSessionRequest{
		Model: "anthropic/claude-sonnet-4.5", Sandbox: &agentv1.CreateSessionRequest_SandboxId{SandboxId: sbID}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSession().GetSessionId()
	stream, err := st.agent.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: id, Text: "talk"})
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; ; n++ {
		resp, err := stream.Recv()
		if err != nil {
			s := status.Convert(err)
			if s.Code() != codes.Unavailable || !strings.Contains(s.Message(), "NATS") {
				t.Fatalf("prompt stream after a long NATS outage: %v, want UNAVAILABLE naming NATS", err)
			}
			if d := s.Details(); len(d) != 1 || d[0].(*errdetails.ErrorInfo).GetReason() != "NATS_UNAVAILABLE" {
				t.Errorf("details %v, want ErrorInfo NATS_UNAVAILABLE", d)
			}
			break
		}
		if resp.GetEvent().GetPromptCompleted() != nil {
			t.Fatal("the prompt completed with NATS down")
		}
		if n == 10 {
			np.kill()
		}
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		got, err := st.agent.GetSession(t.Context(), &agentv1.GetSessionRequest{SessionId: id})
		if err != nil {
			return err
		}
		if s := got.GetSession().GetState(); s != agentv1.SessionState_SESSION_STATE_CLOSED {
			return fmt.Errorf("the session is %v, want closed", s)
		}
		return nil
	})
}

func sessionMsgs(t *testing.T, url, id string) uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(t.Context(), eventStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(sessionFilter(id)))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}
