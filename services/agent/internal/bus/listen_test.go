package bus

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestNATSPortInUse: an embedded server whose port is taken says which
// address, that it is the NATS one, and the flag to change, rather than
// that it "did not become ready".
func TestNATSPortInUse(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	addr := held.Addr().String()
	dir := t.TempDir()
	b, err := Open(t.Context(), Config{StoreDir: dir, Listen: addr, SubscriberKeyFile: filepath.Join(dir, "sub.nk")}, discard())
	if err == nil {
		b.Close()
		t.Fatal("Open on a port in use succeeded")
	}
	for _, want := range []string{"the NATS address " + addr + " is in use", "--nats-listen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
