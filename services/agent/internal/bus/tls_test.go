package bus

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, PEM.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fabro test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestEmbeddedListenerTLS: with a certificate the embedded listener speaks
// TLS only; a subscriber that trusts the CA reads events, a plaintext one
// is refused, and the agent's own in-process connection keeps working.
func TestEmbeddedListenerTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	keyFile := filepath.Join(dir, "sub.nk")
	b := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: keyFile,
		ListenTLSCertFile: cert, ListenTLSKeyFile: key})
	publishEvents(t, b, "s_tls", 2)
	if got := replay(t, b, "s_tls", 2); len(got) != 2 {
		t.Fatalf("replayed %d events over the in-process connection, want 2", len(got))
	}
	nkey, err := nats.NkeyOptionFromSeed(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.ClientURL(), nkey, nats.RootCAs(cert))
	if err != nil {
		t.Fatalf("TLS subscriber: %v", err)
	}
	nc.Close()
	if nc, err := nats.Connect(b.ClientURL(), nkey, nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a subscriber without TLS was accepted")
	}
	// mTLS: a client CA makes a client certificate necessary.
	m := open(t, Config{StoreDir: t.TempDir(), Listen: "127.0.0.1:-1", SubscriberKeyFile: keyFile,
		ListenTLSCertFile: cert, ListenTLSKeyFile: key, ListenTLSClientCAFile: cert})
	if nc, err := nats.Connect(m.ClientURL(), nkey, nats.RootCAs(cert), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("mTLS: a subscriber without a client certificate was accepted")
	}
	nc, err = nats.Connect(m.ClientURL(), nkey, nats.RootCAs(cert), nats.ClientCert(cert, key))
	if err != nil {
		t.Fatalf("mTLS subscriber with a certificate: %v", err)
	}
	nc.Close()
}
