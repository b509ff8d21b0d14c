package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// PKI is a throwaway certificate authority and the certificates a test needs for TLS to a
// loopback server: a server certificate for 127.0.0.1 and localhost, a client certificate, and a
// second, unrelated CA that a client must not trust the server with. Keys are ECDSA P-256; every
// file is PEM, keys unencrypted PKCS #8. The certificates are valid for a day.
type PKI struct {
	Dir string
	// CAFile is the CA's certificate, which signed the server and client certificates.
	CAFile string
	// ServerCertFile and ServerKeyFile are the server's certificate (with the CA after it) and
	// key; ServerCertPEM and ServerKeyPEM are the same bytes, for configs that take PEM inline
	// (Kafka's ssl.keystore.certificate.chain and ssl.keystore.key).
	ServerCertFile, ServerKeyFile string
	ServerCertPEM, ServerKeyPEM   []byte
	CAPEM                         []byte
	// ClientCertFile and ClientKeyFile are a client certificate (common name "ckf-client") and
	// its key, signed by the CA.
	ClientCertFile, ClientKeyFile string
	// OtherCAFile is a CA that signed nothing here: a client that trusts only it must refuse the
	// server.
	OtherCAFile string
	// OtherClientCertFile and OtherClientKeyFile are a client certificate signed by the other
	// CA: a server that requires client certificates of CAFile must refuse it.
	OtherClientCertFile, OtherClientKeyFile string
}

// WritePKI generates a PKI into dir (created if missing).
func WritePKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir}
	ca, caKey, err := newCA("ckf test CA")
	if err != nil {
		return nil, err
	}
	other, otherKey, err := newCA("ckf untrusted CA")
	if err != nil {
		return nil, err
	}
	p.CAPEM = certPEM(ca)
	serverCert, serverKey, err := newLeaf(ca, caKey, "127.0.0.1", true)
	if err != nil {
		return nil, err
	}
	p.ServerCertPEM = append(certPEM(serverCert), p.CAPEM...)
	if p.ServerKeyPEM, err = keyPEM(serverKey); err != nil {
		return nil, err
	}
	clientCert, clientKey, err := newLeaf(ca, caKey, "ckf-client", false)
	if err != nil {
		return nil, err
	}
	clientKeyPEM, err := keyPEM(clientKey)
	if err != nil {
		return nil, err
	}
	otherClient, otherClientKey, err := newLeaf(other, otherKey, "ckf-client", false)
	if err != nil {
		return nil, err
	}
	otherClientKeyPEM, err := keyPEM(otherClientKey)
	if err != nil {
		return nil, err
	}
	files := []struct {
		path *string
		name string
		data []byte
	}{
		{&p.CAFile, "ca.pem", p.CAPEM},
		{&p.ServerCertFile, "server.pem", p.ServerCertPEM},
		{&p.ServerKeyFile, "server-key.pem", p.ServerKeyPEM},
		{&p.ClientCertFile, "client.pem", certPEM(clientCert)},
		{&p.ClientKeyFile, "client-key.pem", clientKeyPEM},
		{&p.OtherCAFile, "other-ca.pem", certPEM(other)},
		{&p.OtherClientCertFile, "other-client.pem", certPEM(otherClient)},
		{&p.OtherClientKeyFile, "other-client-key.pem", otherClientKeyPEM},
	}
	for _, f := range files {
		*f.path = filepath.Join(dir, f.name)
		if err := os.WriteFile(*f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func newCA(name string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

// newLeaf issues a certificate signed by ca: a server certificate for 127.0.0.1, ::1 and
// localhost when server is true, else a client certificate with common name name.
func newLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string, server bool) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: certificate %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func certPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
