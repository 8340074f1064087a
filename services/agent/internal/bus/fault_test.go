package bus

import (
	"bufio"
	"context"
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
	"github.com/nats-io/nats.go/jetstream"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/platform/testkit"
)

// The test binary doubles as an external nats-server: with
// FABRO_BUS_TEST_NATS="<port> <store dir>" it serves JetStream on
// 127.0.0.1:<port>, prints "ready" and runs until killed.
func TestMain(m *testing.M) {
	if spec := os.Getenv("FABRO_BUS_TEST_NATS"); spec != "" {
		f := strings.Fields(spec)
		port, _ := strconv.Atoi(f[0])
		ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: f[1], NoSigs: true, NoLog: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ns.Start()
		if !ns.ReadyForConnections(10 * time.Second) {
			fmt.Fprintln(os.Stderr, "not ready")
			os.Exit(1)
		}
		fmt.Println("ready")
		ns.WaitForShutdown()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// externalServer runs a nats-server process on port with its store in dir.
func externalServer(t *testing.T, port int, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("FABRO_BUS_TEST_NATS=%d %s", port, dir))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("nats-server process did not start: %q", sc.Text())
	}
	return cmd
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// restartEmbedded stops the embedded server and starts a new one on the
// same store; the bus's connection reconnects to it.
func restartEmbedded(t *testing.T, b *Bus, down func()) {
	t.Helper()
	b.ns.Shutdown()
	b.ns.WaitForShutdown()
	down()
	o := *b.sopts
	ns, err := server.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("restarted embedded server not ready")
	}
	b.inproc.mu.Lock()
	b.inproc.ns = ns
	b.inproc.mu.Unlock()
	b.ns = ns
}

func delta(i int) *agentv1.AgentEvent {
	return &agentv1.AgentEvent{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: strconv.Itoa(i)}}}
}

// checkOnce checks that the stream holds the session's events 1..n, each
// exactly once, in order.
func checkOnce(t *testing.T, b *Bus, id string, n int) {
	t.Helper()
	evs := replay(t, b, id, uint64(n))
	for i, ev := range evs {
		if ev.GetSequence() != uint64(i+1) || ev.GetTextDelta().GetDelta() != strconv.Itoa(i+1) {
			t.Fatalf("stored event %d: sequence %d delta %q", i, ev.GetSequence(), ev.GetTextDelta().GetDelta())
		}
	}
	if len(evs) != n {
		t.Fatalf("replayed %d events, want %d", len(evs), n)
	}
	st, err := b.js.Stream(t.Context(), StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context(), jetstream.WithSubjectFilter(SessionFilter(id)))
	if err != nil {
		t.Fatal(err)
	}
	var msgs uint64
	for _, c := range info.State.Subjects {
		msgs += c
	}
	if msgs != uint64(n) {
		t.Errorf("the stream holds %d messages of the session, want %d (no doubles)", msgs, n)
	}
}

// TestLogSurvivesNATSRestart kills NATS (embedded, and an external
// process with SIGKILL) while a session writes events, restarts it, and
// checks that the writer waited (backpressure) and that the stream holds
// 1..N exactly once.
func TestLogSurvivesNATSRestart(t *testing.T) {
	const n, killAt, buffer = 300, 100, 40
	wcfg := WriterConfig{AckTimeout: 300 * time.Millisecond, OutageLimit: time.Minute, BufferEvents: buffer}
	for _, mode := range []string{"embedded", "external"} {
		t.Run(mode, func(t *testing.T) {
			var b *Bus
			var restart func(down func()) // stops NATS, calls down, starts NATS again
			switch mode {
			case "embedded":
				b = open(t, Config{StoreDir: t.TempDir(), Writer: wcfg})
				restart = func(down func()) { restartEmbedded(t, b, down) }
			case "external":
				port, dir := freePort(t), t.TempDir()
				cmd := externalServer(t, port, dir)
				b = open(t, Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Writer: wcfg})
				restart = func(down func()) {
					if err := cmd.Process.Kill(); err != nil { // SIGKILL
						t.Fatal(err)
					}
					_ = cmd.Wait()
					down()
					cmd = externalServer(t, port, dir)
				}
			}
			runRestart(t, b, n, killAt, buffer, restart)
		})
	}
}

func runRestart(t *testing.T, b *Bus, n, killAt, buffer int, restart func(down func())) {
	id := "s_restart"
	log := NewLog(b, id, "", id, 0, nil)
	emitted := make(chan error, 1)
	flushed, goOn := make(chan struct{}), make(chan struct{})
	go func() {
		for i := 1; i <= n; i++ {
			if i == killAt+1 {
				close(flushed)
				<-goOn // NATS is down now
			}
			if _, err := log.Emit(delta(i)); err != nil {
				emitted <- err
				return
			}
		}
		emitted <- nil
	}()
	<-flushed
	testkit.Eventually(t, 30*time.Second, func() error {
		if c := log.Committed(); c < uint64(killAt) {
			return fmt.Errorf("%d events acknowledged before the outage, want %d", c, killAt)
		}
		return nil
	})
	restart(func() {
		close(goOn)
		// While NATS is down the session fills its buffer and waits.
		testkit.Eventually(t, 30*time.Second, func() error {
			if held := log.Last() - log.Committed(); held < uint64(buffer) {
				return fmt.Errorf("the writer holds %d events, want a full buffer of %d", held, buffer)
			}
			return nil
		})
		if err := log.Err(); err != nil {
			t.Fatalf("the log failed during a short outage: %v", err)
		}
		select {
		case err := <-emitted:
			t.Fatalf("the session did not wait while NATS was down: %v", err)
		default:
		}
	})
	if err := <-emitted; err != nil {
		t.Fatalf("emit after the restart: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := log.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	checkOnce(t, b, id, n)
}

// TestLogOutageLimit checks that NATS down for longer than the bound ends
// the log with an error naming NATS.
func TestLogOutageLimit(t *testing.T) {
	b := open(t, Config{StoreDir: t.TempDir(), Writer: WriterConfig{AckTimeout: 100 * time.Millisecond, OutageLimit: 500 * time.Millisecond}})
	log := NewLog(b, "s_down", "", "s_down", 0, nil)
	if _, err := log.Emit(delta(1)); err != nil {
		t.Fatal(err)
	}
	if err := log.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.ns.Shutdown()
	b.ns.WaitForShutdown()
	if _, err := log.Emit(delta(2)); err != nil {
		t.Fatalf("emit during the outage: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := log.Flush(ctx)
	if !errors.Is(err, ErrNATSUnavailable) || !errors.Is(err, ErrEventStream) || !strings.Contains(err.Error(), "NATS") {
		t.Fatalf("flush after a long outage: %v, want ErrNATSUnavailable", err)
	}
	if _, err := log.Emit(delta(3)); !errors.Is(err, ErrNATSUnavailable) {
		t.Errorf("emit after the failure: %v", err)
	}
}
