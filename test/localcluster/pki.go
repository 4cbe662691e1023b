package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
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

// pki is the certificate authority of one local control plane. Every key is
// generated in memory for the cluster's lifetime; nothing is reused across runs.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey

	CAFile string
	CAKey  string
	// ServiceAccountKey signs and ServiceAccountPub verifies service account tokens.
	ServiceAccountKey string
	ServiceAccountPub string
	ServingCert       string
	ServingKey        string
}

// certValidity outlives any test or demo run by far, and is short enough that
// a leaked key is worthless soon.
const certValidity = 7 * 24 * time.Hour

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating pki dir: %w", err)
	}
	p := &pki{dir: dir}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "fleet-local-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA: %w", err)
	}
	p.caCert, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA: %w", err)
	}
	p.caKey = key
	if p.CAFile, p.CAKey, err = p.write("ca", der, key); err != nil {
		return nil, err
	}

	p.ServingCert, p.ServingKey, err = p.issue("serving", pkix.Name{CommonName: "kube-apiserver"},
		[]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		// The real node's pods reach the apiserver at their bridge's
		// gateway (realnode_network.go).
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(realNodeGateway)})
	if err != nil {
		return nil, err
	}

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generating service account key: %w", err)
	}
	p.ServiceAccountKey = filepath.Join(dir, "sa.key")
	p.ServiceAccountPub = filepath.Join(dir, "sa.pub")
	if err := writePEM(p.ServiceAccountKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encoding service account public key: %w", err)
	}
	if err := writePEM(p.ServiceAccountPub, "PUBLIC KEY", pub); err != nil {
		return nil, err
	}
	return p, nil
}

// ClientCert issues a client certificate for user in groups and returns the
// paths of the certificate and its key.
func (p *pki) ClientCert(name, user string, groups ...string) (certFile, keyFile string, err error) {
	return p.issue(name, pkix.Name{CommonName: user, Organization: groups},
		[]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, nil)
}

func (p *pki) issue(name string, subject pkix.Name, usage []x509.ExtKeyUsage, dnsNames []string, ips []net.IP) (string, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("generating key for %s: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usage,
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		return "", "", fmt.Errorf("signing certificate for %s: %w", name, err)
	}
	return p.write(name, der, key)
}

func (p *pki) write(name string, der []byte, key *ecdsa.PrivateKey) (string, string, error) {
	certFile := filepath.Join(p.dir, name+".crt")
	keyFile := filepath.Join(p.dir, name+".key")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("encoding key for %s: %w", name, err)
	}
	if err := writePEM(keyFile, "EC PRIVATE KEY", keyDER); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func writePEM(path, kind string, der []byte) error {
	data := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(fmt.Sprintf("reading random serial: %v", err))
	}
	return n
}
