package controllers

import (
	"encoding/pem"
	"io"
	"k8s.io/klog/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	restclient "k8s.io/client-go/rest"
	"k8s.io/controller-manager/pkg/clientbuilder"
)

// controllerHTTPClient is the HTTP client of a controller client built by
// a replica's builder for server, the inner config wrapped by wrap if set.
func controllerHTTPClient(t *testing.T, server *httptest.Server, authority *movingAuthority, wrap func(http.RoundTripper) http.RoundTripper) *http.Client {
	t.Helper()
	root := &restclient.Config{Host: server.URL, TLSClientConfig: restclient.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: server.Certificate().Raw}),
	}}
	if wrap != nil {
		root.Wrap(wrap)
	}
	builder := newSharedLimiterBuilder(klog.Background(), clientbuilder.SimpleControllerClientBuilder{ClientConfig: root}, "replica-a", authority)
	cfg, err := builder.Config("writer")
	if err != nil {
		t.Fatal(err)
	}
	client, err := restclient.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// TestBodyAfterAuthorityNeverArrives freezes a write between its headers
// and its body, as a paused process is, and lets authority run out
// before the body is handed over: the body must never reach the server,
// even though the timer that resets writes in flight has not run yet,
// while reads on the same client go on.
func TestBodyAfterAuthorityNeverArrives(t *testing.T) {
	const body = `{"kind":"ConfigMap","metadata":{"name":"late"}}`
	tests := []struct {
		name string
		// lapse: authority runs out after the headers reached the
		// server and before the body is sent.
		lapse    bool
		wantBody bool
	}{
		{name: "authority throughout", wantBody: true},
		{name: "authority runs out between headers and body", lapse: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			headers := make(chan struct{}, 1)
			received := make(chan string, 1)
			server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					w.WriteHeader(http.StatusOK)
					return
				}
				headers <- struct{}{}
				got, _ := io.ReadAll(r.Body)
				received <- string(got)
				w.WriteHeader(http.StatusCreated)
			}))
			server.EnableHTTP2 = true
			server.StartTLS()
			defer server.Close()

			authority := &movingAuthority{until: time.Now().Add(time.Hour)}
			client := controllerHTTPClient(t, server, authority, nil)

			bodyReader, bodyWriter := io.Pipe()
			req, err := http.NewRequest(http.MethodPost, server.URL+"/api/v1/namespaces/a/configmaps", bodyReader)
			if err != nil {
				t.Fatal(err)
			}
			answered := make(chan error, 1)
			go func() {
				resp, err := client.Do(req)
				if err == nil {
					if resp.ProtoMajor != 2 {
						t.Errorf("the test meant HTTP/2, got %s", resp.Proto)
					}
					resp.Body.Close()
				}
				answered <- err
			}()
			select {
			case <-headers:
			case <-time.After(10 * time.Second):
				t.Fatal("the write's headers never reached the server")
			}
			if tc.lapse {
				// Past the deadline, well before the 500 ms recheck of
				// the write in flight would notice.
				authority.set(time.Now().Add(-time.Millisecond))
			}
			go func() {
				_, _ = io.Copy(bodyWriter, strings.NewReader(body))
				bodyWriter.Close()
			}()

			select {
			case got := <-received:
				if arrived := got == body; arrived != tc.wantBody {
					t.Fatalf("server received body %q, want the body to arrive: %v", got, tc.wantBody)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the server's handler never finished reading the body")
			}
			select {
			case err := <-answered:
				if (err != nil) == tc.wantBody {
					t.Fatalf("write answered with error %v, want an error: %v", err, !tc.wantBody)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the write was never answered")
			}

			resp, err := client.Get(server.URL + "/api/v1/namespaces/a/configmaps")
			if err != nil {
				t.Fatalf("a read after the write: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("a read after the write: %s", resp.Status)
			}
		})
	}
}

// TestWriteConnectionsShared: the writes of every controller name with the
// same credentials go out on one transport (one HTTP/2 connection), as all
// clients of kube-controller-manager share one, and a config with other
// TLS settings gets its own.
func TestWriteConnectionsShared(t *testing.T) {
	authority := &movingAuthority{until: time.Now().Add(time.Hour)}
	writes := newWriteTransports(klog.Background(), authority)
	tests := []struct {
		name     string
		a, b     *restclient.Config
		wantSame bool
	}{
		{
			name:     "two controllers, one bearer token each",
			a:        &restclient.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: restclient.TLSClientConfig{Insecure: true}, BearerToken: "a"},
			b:        &restclient.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: restclient.TLSClientConfig{Insecure: true}, BearerToken: "b"},
			wantSame: true,
		},
		{
			name: "other TLS settings",
			a:    &restclient.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: restclient.TLSClientConfig{Insecure: true}},
			b:    &restclient.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: restclient.TLSClientConfig{Insecure: true, ServerName: "kubernetes"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := writes.forConfig(tc.a)
			if err != nil {
				t.Fatal(err)
			}
			b, err := writes.forConfig(tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if same := a == b; same != tc.wantSame {
				t.Fatalf("one transport for both: %v, want %v", same, tc.wantSame)
			}
		})
	}
}

// headerRoundTripper adds a header, as a client builder's token source
// does through the config's WrapTransport.
type headerRoundTripper struct {
	next        http.RoundTripper
	name, value string
}

func (h headerRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(h.name, h.value)
	return h.next.RoundTrip(req)
}

// TestWritesKeepTheConfigsWrappers: writes leave through the wrappers the
// inner config carries (kube-controller-manager's service account client
// builder adds each controller's token there), as reads do; without them
// a write goes out as system:anonymous.
func TestWritesKeepTheConfigsWrappers(t *testing.T) {
	seen := make(chan string, 2)
	server := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Method + " " + r.Header.Get("Authorization")
		w.WriteHeader(http.StatusOK)
	}))
	server.EnableHTTP2 = true
	server.StartTLS()
	defer server.Close()

	client := controllerHTTPClient(t, server, &movingAuthority{until: time.Now().Add(time.Hour)}, func(rt http.RoundTripper) http.RoundTripper {
		return headerRoundTripper{next: rt, name: "Authorization", value: "Bearer from-the-builder"}
	})
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req, err := http.NewRequest(method, server.URL+"/api/v1/namespaces/a/configmaps", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := <-seen, method+" Bearer from-the-builder"; got != want {
			t.Errorf("server saw %q, want %q", got, want)
		}
	}
}
