package faultproxy

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// testCA signs the upstream's, the proxy's and the client's certificates.
type testCA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{dir: t.TempDir(), cert: cert, key: key}
	ca.file = ca.write(t, "ca.crt", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(ca.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue signs a certificate for 127.0.0.1 and returns its files.
func (ca *testCA) issue(t *testing.T, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.write(t, name+".crt", "CERTIFICATE", der), ca.write(t, name+".key", "EC PRIVATE KEY", keyDER)
}

// TestHTTPProxy: while stalled, a watch stream delivers nothing and
// other requests are answered; released, the stream goes on with what
// was held. Throttled, it answers 429 as API Priority and Fairness does,
// and open streams go on. The client's identity reaches the upstream as sent: its token
// alone, or the client certificate when it sent none.
func TestHTTPProxy(t *testing.T) {
	ca := newTestCA(t)
	var mu sync.Mutex
	seen := map[string]string{} // path -> identity the upstream saw
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := "anonymous"
		if len(r.TLS.PeerCertificates) > 0 {
			who = "cert:" + r.TLS.PeerCertificates[0].Subject.CommonName
		}
		if auth := r.Header.Get("Authorization"); auth != "" {
			if who != "anonymous" {
				who += "+"
			} else {
				who = ""
			}
			who += auth
		}
		mu.Lock()
		seen[r.URL.Path] = who
		mu.Unlock()
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprintln(w, "ok")
			return
		}
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "event %d\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	serverCert, serverKey := ca.issue(t, "upstream", x509.ExtKeyUsageServerAuth)
	pair, err := tls.LoadX509KeyPair(serverCert, serverKey)
	if err != nil {
		t.Fatal(err)
	}
	upstream.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequestClientCert}
	upstream.StartTLS()
	t.Cleanup(upstream.Close)

	clientCert, clientKey := ca.issue(t, "replica", x509.ExtKeyUsageClientAuth)
	servingCert, servingKey := ca.issue(t, "proxy", x509.ExtKeyUsageServerAuth)
	s, err := StartHTTPProxy(upstream.URL, ProxyTLS{CAFile: ca.file, ClientCertFile: clientCert, ClientKey: clientKey, ServingCertFile: servingCert, ServingKey: servingKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	base := "https://" + s.Addr()

	res, err := client.Get(base + "/watch-stream?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	lines := make(chan string, 1000)
	go func() {
		r := bufio.NewReader(res.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- line
		}
	}()
	waitLine := func(d time.Duration) bool {
		select {
		case _, ok := <-lines:
			return ok
		case <-time.After(d):
			return false
		}
	}
	if !waitLine(5 * time.Second) {
		t.Fatal("no watch event through the proxy before a stall")
	}
	if res.ProtoMajor != 2 {
		t.Errorf("the proxy spoke %s to the client, want HTTP/2 (client-go multiplexes over it)", res.Proto)
	}

	s.StallWatches(true)
	// What was read before the stall may still be on its way.
	time.Sleep(100 * time.Millisecond)
	for len(lines) > 0 {
		<-lines
	}
	if waitLine(300 * time.Millisecond) {
		t.Error("a watch event came through a stall")
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/with-token", nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	for _, r := range []*http.Request{req, mustRequest(t, base+"/with-cert")} {
		got, err := client.Do(r)
		if err != nil {
			t.Fatalf("%s while stalled: %v", r.URL.Path, err)
		}
		body, _ := io.ReadAll(got.Body)
		got.Body.Close()
		if string(body) != "ok\n" {
			t.Errorf("%s while stalled: %q, want ok", r.URL.Path, body)
		}
	}
	s.StallWatches(false)
	if !waitLine(5 * time.Second) {
		t.Error("the watch stream did not go on after the stall")
	}

	s.Throttle(true)
	got, err := client.Get(base + "/throttled")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if got.StatusCode != http.StatusTooManyRequests || got.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), `"reason":"TooManyRequests"`) {
		t.Errorf("throttled: HTTP %d, Retry-After %q, %s; want 429 as API Priority and Fairness answers", got.StatusCode, got.Header.Get("Retry-After"), body)
	}
	if !waitLine(5 * time.Second) {
		t.Error("an open watch stream stopped while throttled")
	}
	s.Throttle(false)
	if got, err := client.Get(base + "/after"); err != nil || got.StatusCode != http.StatusOK {
		t.Errorf("after the throttle: %v %v", got, err)
	}
	if s.Rejected() != 1 {
		t.Errorf("%d requests rejected, want 1", s.Rejected())
	}

	mu.Lock()
	defer mu.Unlock()
	if _, ok := seen["/throttled"]; ok {
		t.Error("a throttled request reached the upstream")
	}
	for path, want := range map[string]string{"/with-token": "Bearer t0ken", "/with-cert": "cert:replica", "/watch-stream": "cert:replica"} {
		if seen[path] != want {
			t.Errorf("the upstream saw %s from %q, want %q", path, seen[path], want)
		}
	}
}

func mustRequest(t *testing.T, url string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
