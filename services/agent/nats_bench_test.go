package agent

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	agentv1 "github.com/fabro-sh/fabro-go/gen/fabro/agent/v1"
	"github.com/fabro-sh/fabro-go/services/agent/internal/bus"
)

// The test binary doubles as a NATS subscriber in another process: with
// FABRO_AGENT_BENCH_SUBSCRIBE="<url> <session id> <count>" it prints
// "ready", reads count events of the session, prints "done" and exits.
// (The end-to-end event tests, with the gateway and the sandbox, are in
// e2e/agent.)
func TestMain(m *testing.M) {
	if spec := os.Getenv("FABRO_AGENT_BENCH_SUBSCRIBE"); spec != "" {
		if err := benchSubscribe(strings.Fields(spec)); err != nil {
			fmt.Fprintln(os.Stderr, "subscriber:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func benchSubscribe(a []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	key, err := nats.NkeyOptionFromSeed(os.Getenv("FABRO_AGENT_BENCH_NKEY"))
	if err != nil {
		return err
	}
	nc, err := nats.Connect(a[0], key)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	count, _ := strconv.Atoi(a[2])
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.SessionFilter(a[1])}})
	if err != nil {
		return err
	}
	fmt.Println("ready")
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for range count {
		if _, err := it.Next(); err != nil {
			return err
		}
	}
	fmt.Println("done")
	return nil
}

// BenchmarkEventsToAnotherProcess measures events per second from a
// session's log through the embedded NATS server (JetStream, file storage)
// to a subscriber in another process.
func BenchmarkEventsToAnotherProcess(b *testing.B) {
	logger := testLogger(b)
	// The gateway and the sandbox are never called: only the event path runs.
	svc, err := New(b.Context(), Config{LLMAddr: "127.0.0.1:1", SandboxAddr: "127.0.0.1:1", NATSListen: "127.0.0.1:-1",
		DataDir: filepath.Join(b.TempDir(), "data")}, logger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Close() })
	const n = 20000
	for b.Loop() {
		id := newID("bench_")
		cmd := exec.CommandContext(b.Context(), os.Args[0], "-test.run=^$", "-test.bench=^$")
		cmd.Env = append(os.Environ(), "FABRO_AGENT_BENCH_SUBSCRIBE="+svc.NATSURL()+" "+id+" "+strconv.Itoa(n),
			"FABRO_AGENT_BENCH_NKEY="+svc.NATSSubscriberKeyFile())
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			b.Fatalf("subscriber did not start: %q %v", sc.Text(), sc.Err())
		}
		log := bus.NewLog(svc.bus, id, "", id, 0, nil)
		start := time.Now()
		for range n {
			if _, err := log.Emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: "some streamed text"}}}); err != nil {
				b.Fatal(err)
			}
		}
		if !sc.Scan() || sc.Text() != "done" {
			b.Fatalf("subscriber: %q", sc.Text())
		}
		elapsed := time.Since(start)
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	}
}
