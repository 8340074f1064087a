// Package cluster runs the cluster deployment (compose.cluster.yaml:
// three NATS nodes, two agent replicas, the other services with the fake
// model provider) as containers on its private Docker networks, and
// injects faults in the middle of prompts. `make test-cluster` (run by
// `make test`) builds the images offline and runs it.
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	sandboxv1 "github.com/fabro-sh/fabro-go/gen/fabro/sandbox/v1"
	vaultv1 "github.com/fabro-sh/fabro-go/gen/fabro/vault/v1"
)

// project is the compose project of this run (FABRO_CLUSTER_PROJECT, which
// `make test-cluster` derives per run): its containers, networks and
// volumes are named for it, so two runs on one engine never meet.
var project = func() string {
	if p := os.Getenv("FABRO_CLUSTER_PROJECT"); p != "" {
		return p
	}
	return "cluster"
}()

type compose struct {
	t    *testing.T
	file string
	cmd  []string
}

func (c compose) run(args ...string) string {
	c.t.Helper()
	all := append(append(append([]string(nil), c.cmd[1:]...), "-p", project, "-f", c.file), args...)
	out, err := exec.Command(c.cmd[0], all...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", c.cmd[0], strings.Join(all, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func composeCommand(t *testing.T) []string {
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if p, err := exec.LookPath("docker-compose"); err == nil {
		return []string{p}
	}
	t.Fatal("neither docker compose nor docker-compose is installed")
	return nil
}

// bearer presents token on every call.
func bearer(token string) []grpc.DialOption {
	add := func(ctx context.Context) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(add(ctx), method, req, reply, cc, opts...)
		}),
		grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(add(ctx), desc, cc, method, opts...)
		}),
	}
}

func dial(t *testing.T, addr, token string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, bearer(token)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// await polls cond (a container's state: no notification reaches the
// test) until it holds.
func await(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestComposeCluster: a session created on agent1 and prompted through
// agent2 (forwarded to its owner); in the middle of one prompt each, a
// NATS node is killed, a NATS node is cut off its network and put back,
// and the owning agent replica is killed (SIGKILL). Each prompt completes,
// and the session's event stream, read through the surviving replica, is
// 1..N with no gap and no double.
func TestComposeCluster(t *testing.T) {
	file := os.Getenv("FABRO_CLUSTER_COMPOSE")
	if file == "" {
		t.Skip("the cluster container test runs under `make test-cluster` (part of `make test`), which builds its images first")
	}
	c := compose{t: t, file: file, cmd: composeCommand(t)}
	_ = exec.Command(c.cmd[0], append(c.cmd[1:], "-p", project, "-f", file, "down", "-v", "--remove-orphans")...).Run()
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command(c.cmd[0], append(c.cmd[1:], "-p", project, "-f", file, "logs", "--tail=60", "agent1", "agent2")...).CombinedOutput()
			t.Logf("agent logs:\n%s", out)
		}
		_ = exec.Command(c.cmd[0], append(c.cmd[1:], "-p", project, "-f", file, "down", "-v", "--remove-orphans", "-t", "2")...).Run()
	})
	c.run("up", "-d")
	id := func(svc string) string { return c.run("ps", "-q", svc) }

	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	await(t, 60*time.Second, "the admin token", func() error {
		return exec.Command("docker", "cp", id("vault")+":/issue/admin/token", tokenFile).Run()
	})
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(tok))
	ctx := t.Context()
	for _, svc := range []string{"vault", "agent1", "agent2"} {
		await(t, 90*time.Second, svc+" running", func() error {
			st := docker(t, "inspect", "-f", "{{.State.Running}} {{.RestartCount}}", id(svc))
			if st != "true 0" {
				return fmt.Errorf("state %q", st)
			}
			return nil
		})
	}
	vault := vaultv1.NewVaultServiceClient(dial(t, c.run("port", "vault", "7704"), token))
	agent1 := agentv1.NewAgentServiceClient(dial(t, c.run("port", "agent1", "7703"), token))
	agent2 := agentv1.NewAgentServiceClient(dial(t, c.run("port", "agent2", "7703"), token))
	await(t, 90*time.Second, "the vault", func() error {
		_, err := vault.PutSecret(ctx, &vaultv1.PutSecretRequest{Name: "ANTHROPIC_API_KEY", Value: "offline-cluster"})
		return err
	})
	for _, a := range []agentv1.AgentServiceClient{agent1, agent2} {
		await(t, 90*time.Second, "the agent replicas", func() error {
			_, err := a.ListSessions(ctx, &agentv1.ListSessionsRequest{})
			return err
		})
	}
	var created *agentv1.CreateSessionResponse
	await(t, 60*time.Second, "a session", func() error {
		created, err = agent1.CreateSession(ctx, &agentv1.CreateSessionRequest{
			Model:   "anthropic/claude-sonnet-4.5",
			Sandbox: &agentv1.CreateSessionRequest_SandboxSpec{SandboxSpec: &sandboxv1.SandboxSpec{Driver: "local"}},
		})
		return err
	})
	sid := created.GetSession().GetSessionId()
	agents := map[string]agentv1.AgentServiceClient{"agent1": agent1, "agent2": agent2}

	natsCut := id("nats3")
	faults := []struct {
		name   string
		inject func(t *testing.T) (follow string) // the replica to read the events through
		after  func(t *testing.T)                 // once the prompt completed
	}{
		{"a NATS node killed", func(t *testing.T) string { docker(t, "kill", id("nats2")); return "agent2" }, func(t *testing.T) { docker(t, "start", id("nats2")) }},
		{"a NATS node cut off and back", func(t *testing.T) string {
			docker(t, "network", "disconnect", project+"_nats", natsCut)
			time.Sleep(3 * time.Second) // the cut lasts: what is being tested
			docker(t, "network", "connect", "--alias", "nats3", project+"_nats", natsCut)
			return "agent2"
		}, nil},
		{"the owning agent replica killed", func(t *testing.T) string {
			o := owner(t, c, sid)
			docker(t, "kill", "-s", "KILL", id(o))
			t.Logf("killed %s, the owner", o)
			if o == "agent1" {
				return "agent2"
			}
			return "agent1"
		}, nil},
	}
	// FABRO_CLUSTER_FAULT runs only the faults whose name has it;
	// FABRO_CLUSTER_DEBUG prints the agents' logs after each.
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			if os.Getenv("FABRO_CLUSTER_FAULT") != "" && !strings.Contains(f.name, os.Getenv("FABRO_CLUSTER_FAULT")) {
				return
			}
			promptID, seen := startPrompt(t, agent2, sid)
			survivor := f.inject(t)
			fault := time.Now()
			evs := follow(t, agents[survivor], sid, promptID)
			checkOnce(t, evs)
			last := evs[len(evs)-1]
			if st := last.GetPromptCompleted().GetReport().GetStatus(); st != agentv1.PromptStatus_PROMPT_STATUS_COMPLETED {
				t.Errorf("prompt ended %s: %v", st, last.GetPromptCompleted().GetReport())
			}
			// The longest pause between two events of the prompt after
			// the fault, and the new owner's first event (its resume
			// begins with memory_loaded).
			var pause time.Duration
			var resumed time.Time
			for i, ev := range evs {
				if ev.GetSequence() <= seen {
					continue
				}
				pause = max(pause, ev.GetTime().AsTime().Sub(evs[i-1].GetTime().AsTime()))
				if ev.GetMemoryLoaded() != nil && resumed.IsZero() {
					resumed = ev.GetTime().AsTime()
				}
			}
			t.Logf("%d events in all; longest pause after the fault %s", len(evs), pause.Round(time.Millisecond))
			switch {
			case !resumed.IsZero():
				t.Logf("the session moved: the new owner's first event came %s after the fault", resumed.Sub(fault).Round(time.Millisecond))
			case strings.Contains(f.name, "replica killed"):
				t.Errorf("no replica resumed the session after its owner was killed")
			}
			if os.Getenv("FABRO_CLUSTER_DEBUG") != "" {
				out, _ := exec.Command(c.cmd[0], append(c.cmd[1:], "-p", project, "-f", file, "logs", "--tail=40", "agent1", "agent2")...).CombinedOutput()
				t.Logf("agent logs:\n%s", out)
			}
			if f.after != nil {
				f.after(t)
			}
		})
	}
}

// startPrompt starts a prompt through a and reads it until its first text
// delta (the model's slow reply is under way); it returns the prompt's id
// and the last sequence seen.
func startPrompt(t *testing.T, a agentv1.AgentServiceClient, sid string) (string, uint64) {
	t.Helper()
	var stream agentv1.AgentService_PromptClient
	await(t, 60*time.Second, "a prompt", func() error {
		var err error
		stream, err = a.Prompt(t.Context(), &agentv1.PromptRequest{SessionId: sid, Text: "Tell me slowly."})
		if err != nil {
			return err
		}
		_, err = stream.Header()
		return err
	})
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("prompt stream: %v", err)
		}
		if ev := resp.GetEvent(); ev.GetTextDelta() != nil {
			return ev.GetPromptId(), ev.GetSequence()
		}
	}
}

// follow reads the session's events from the first through a, again
// after every broken stream, until the prompt's prompt_completed.
func follow(t *testing.T, a agentv1.AgentServiceClient, sid, promptID string) []*agentv1.AgentEvent {
	t.Helper()
	var evs []*agentv1.AgentEvent
	await(t, 90*time.Second, "the prompt's completion", func() error {
		evs = evs[:0]
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		s, err := a.StreamEvents(ctx, &agentv1.StreamEventsRequest{SessionId: sid, FromSequence: 1, Follow: true})
		if err != nil {
			return err
		}
		for {
			resp, err := s.Recv()
			if err != nil {
				return fmt.Errorf("after %d events: %w", len(evs), err)
			}
			ev := resp.GetEvent()
			evs = append(evs, ev)
			if ev.GetPromptCompleted() != nil && ev.GetPromptId() == promptID {
				return nil
			}
		}
	})
	return evs
}

// checkOnce fails unless the events are sequences 1..N, each once.
func checkOnce(t *testing.T, evs []*agentv1.AgentEvent) {
	t.Helper()
	var b bytes.Buffer
	for i, ev := range evs {
		if ev.GetSequence() != uint64(i+1) {
			for _, e := range evs[max(0, i-3):min(len(evs), i+3)] {
				fmt.Fprintf(&b, " %d", e.GetSequence())
			}
			t.Fatalf("event %d has sequence %d (around:%s)", i+1, ev.GetSequence(), b.String())
		}
	}
}

// owner is the agent replica serving the session: agent1, which created
// it, unless a replica's log says it took the session over since (a lost
// lease moves a session too).
func owner(t *testing.T, c compose, sid string) string {
	t.Helper()
	who, at := "agent1", ""
	for _, svc := range []string{"agent1", "agent2"} {
		for _, line := range strings.Split(c.run("logs", "--no-color", svc), "\n") {
			// The latest replica to claim the session's lease; a move on a
			// NATS cut claims it through a resume, not a takeover.
			if !strings.Contains(line, "this replica serves the session") && !strings.Contains(line, "took over a running session") || !strings.Contains(line, sid) {
				continue
			}
			_, js, _ := strings.Cut(line, "{")
			var rec struct{ Time string }
			if json.Unmarshal([]byte("{"+js), &rec) == nil && rec.Time > at {
				who, at = svc, rec.Time
			}
		}
	}
	return who
}
