package main

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
	"strings"
	"testing"
	"time"
)

// writeCerts writes a CA (ca.pem) and a certificate for 127.0.0.1 signed by
// it (cert.pem, key.pem) into dir.
func writeCerts(t *testing.T, dir string) {
	t.Helper()
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ = x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fabro"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	write("ca.pem", "CERTIFICATE", caDER)
	write("cert.pem", "CERTIFICATE", der)
	write("key.pem", "EC PRIVATE KEY", kd)
}

// TestServeTLS: fabro serve on TLS; the fabro command dials it with
// -tls-ca-file, and a plaintext client gets nowhere.
func TestServeTLS(t *testing.T) {
	certs := t.TempDir()
	writeCerts(t, certs)
	s := startServe(t, t.TempDir(), "FABRO_TLS_CERT_FILE="+filepath.Join(certs, "cert.pem"), "FABRO_TLS_KEY_FILE="+filepath.Join(certs, "key.pem"))
	if _, errOut, code := fabro(t, "", "secret", "list", "-server", s.grpcAddr, "-tls-ca-file", filepath.Join(certs, "ca.pem")); code != 0 {
		t.Errorf("secret list over TLS: %d %s", code, errOut)
	}
	if _, errOut, code := fabro(t, "", "secret", "list", "-server", s.grpcAddr, "-timeout", "2s"); code == 0 {
		t.Errorf("a plaintext client reached a TLS server: %s", errOut)
	} else if !strings.Contains(errOut, "does not speak the same protocol: a server with TLS needs --tls-ca-file") {
		t.Errorf("plaintext client: %s", errOut)
	}
}
