package cluster_test

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
	"github.com/fabro-sh/fabro-go/services/agent/natstest"
)

// The test binary doubles as a subscriber in another process: with
// FABRO_CLUSTER_BENCH_SUB="<url> <session id> <count>" (and an nkey seed
// file in FABRO_CLUSTER_BENCH_NKEY for the embedded server) it prints
// "ready", reads count events of the session from the stream as they are
// stored, prints "done" and exits.
func TestMain(m *testing.M) {
	if spec := os.Getenv("FABRO_CLUSTER_BENCH_SUB"); spec != "" {
		if err := subscriber(strings.Fields(spec)); err != nil {
			fmt.Fprintln(os.Stderr, "subscriber:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func subscriber(a []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var opts []nats.Option
	if seed := os.Getenv("FABRO_CLUSTER_BENCH_NKEY"); seed != "" {
		o, err := nats.NkeyOptionFromSeed(seed)
		if err != nil {
			return err
		}
		opts = append(opts, o)
	}
	nc, err := nats.Connect(a[0], opts...)
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
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	fmt.Println("ready")
	for range count {
		if _, err := it.Next(); err != nil {
			return err
		}
	}
	fmt.Println("done")
	return nil
}

// BenchmarkSubscriberThroughput: events per second from one session's
// log to a subscriber in another process, on the embedded single node
// (R1) and on a three-node cluster (R3), side by side; each iteration is
// a fresh session of 2,000 events, timed from the first emit to the
// subscriber's last receipt.
func BenchmarkSubscriberThroughput(b *testing.B) {
	const events = 2000
	for _, d := range []struct {
		name string
		open func(b *testing.B) (cfg bus.Config, url, nkey string)
	}{
		{"embedded", func(b *testing.B) (bus.Config, string, string) {
			key := filepath.Join(b.TempDir(), "sub.nk")
			return bus.Config{StoreDir: b.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: key}, "", key
		}},
		{"cluster3", func(b *testing.B) (bus.Config, string, string) {
			c := natstest.StartCluster(b, 3)
			return bus.Config{URL: c.URL(), Replicas: 3}, c.URL(), ""
		}},
	} {
		b.Run(d.name, func(b *testing.B) {
			cfg, url, nkey := d.open(b)
			bs, err := bus.Open(b.Context(), cfg, discard())
			if err != nil {
				b.Fatal(err)
			}
			defer bs.Close()
			if url == "" {
				url = bs.ClientURL()
			}
			var total time.Duration
			for i := 0; b.Loop(); i++ {
				sid := fmt.Sprintf("s_bench%d", i)
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), fmt.Sprintf("FABRO_CLUSTER_BENCH_SUB=%s %s %d", url, sid, events), "FABRO_CLUSTER_BENCH_NKEY="+nkey)
				cmd.Stderr = os.Stderr
				out, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				sc := bufio.NewScanner(out)
				if !sc.Scan() || sc.Text() != "ready" {
					b.Fatalf("subscriber: %q", sc.Text())
				}
				log := bus.NewLog(bs, sid, "", sid, 0, nil)
				start := time.Now()
				for range events {
					if _, err := log.Emit(&agentv1.AgentEvent{Event: &agentv1.AgentEvent_TextDelta{TextDelta: &agentv1.TextDelta{Delta: "some streamed model text, a few words"}}}); err != nil {
						b.Fatal(err)
					}
				}
				if !sc.Scan() || sc.Text() != "done" {
					b.Fatalf("subscriber: %q", sc.Text())
				}
				total += time.Since(start)
				_ = cmd.Wait()
				log.Close()
			}
			b.ReportMetric(float64(events*b.N)/total.Seconds(), "events/s")
		})
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
