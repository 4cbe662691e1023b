package faultproxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
)

// HTTPProxy is an HTTPS proxy between one client and kube-apiserver that
// injects faults a TCP proxy cannot: it freezes the client's watch
// streams while its other requests flow (the connection stays up, lists
// and writes are answered, Lease renewals succeed, and the watch events
// stop), or answers every request 429 as API Priority and Fairness does
// when it rejects. It terminates TLS with a certificate the client trusts
// and forwards each request with the client's own credentials: its bearer
// token as sent, or, for a request without one, the client certificate it
// is given (the identity the client presents), so that the apiserver sees
// the same user.
type HTTPProxy struct {
	server   *http.Server
	listener net.Listener
	rejected atomic.Int64

	mu        sync.Mutex
	stalled   bool
	throttled bool
	// resumed is closed when a stall ends, releasing the streams held.
	resumed chan struct{}
}

// ProxyTLS is what the proxy needs to stand in for kube-apiserver: the
// CA that signed kube-apiserver's certificate, the client's certificate
// and key, and a serving certificate for 127.0.0.1 the client trusts.
type ProxyTLS struct {
	CAFile                      string
	ClientCertFile, ClientKey   string
	ServingCertFile, ServingKey string
}

// StartHTTPProxy listens on a free loopback port and forwards to
// target ("https://127.0.0.1:6443").
func StartHTTPProxy(target string, certs ProxyTLS) (*HTTPProxy, error) {
	upstream, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("HTTP fault proxy target %q: %w", target, err)
	}
	ca, err := os.ReadFile(certs.CAFile)
	if err != nil {
		return nil, fmt.Errorf("HTTP fault proxy: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("HTTP fault proxy: no certificate in %s", certs.CAFile)
	}
	clientCert, err := tls.LoadX509KeyPair(certs.ClientCertFile, certs.ClientKey)
	if err != nil {
		return nil, fmt.Errorf("HTTP fault proxy: the client's certificate: %w", err)
	}
	withCert := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}}}
	withToken := &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots}}

	s := &HTTPProxy{resumed: make(chan struct{})}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Host = upstream.Host
		},
		Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			// A request that carries a token must not also present the
			// client's certificate: the apiserver would take the
			// certificate's user for the token's.
			if r.Header.Get("Authorization") != "" {
				return withToken.RoundTrip(r)
			}
			return withCert.RoundTrip(r)
		}),
		// Watch events pass as they come.
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			if isWatch(res.Request) {
				res.Body = &stallingBody{ReadCloser: res.Body, ctx: res.Request.Context(), proxy: s}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("HTTP fault proxy listening: %w", err)
	}
	s.listener = l
	s.server = &http.Server{Handler: s.throttling(proxy), ErrorLog: log.New(io.Discard, "", 0)}
	go func() {
		if err := s.server.ServeTLS(l, certs.ServingCertFile, certs.ServingKey); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "HTTP fault proxy: %v\n", err)
		}
	}()
	return s, nil
}

// Addr is the proxy's address ("127.0.0.1:port").
func (s *HTTPProxy) Addr() string { return s.listener.Addr().String() }

// Throttle makes the proxy answer every new request (true) as API
// Priority and Fairness answers one it rejects: 429 with Retry-After: 1,
// which client-go waits out and retries until its request's context
// ends. Open watch streams go on.
func (s *HTTPProxy) Throttle(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttled = on
}

// Rejected is how many requests Throttle has answered 429.
func (s *HTTPProxy) Rejected() int64 { return s.rejected.Load() }

// tooManyRequests is kube-apiserver's answer when API Priority and
// Fairness rejects a request.
const tooManyRequests = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","details":{"retryAfterSeconds":1},"code":429}` + "\n"

func (s *HTTPProxy) throttling(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		throttled := s.throttled
		s.mu.Unlock()
		if !throttled {
			next.ServeHTTP(w, r)
			return
		}
		s.rejected.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, tooManyRequests)
	})
}

// StallWatches freezes (true) or releases (false) every watch stream, open or
// opened while stalled: what the apiserver sends waits in the proxy.
func (s *HTTPProxy) StallWatches(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on == s.stalled {
		return
	}
	s.stalled = on
	if !on {
		close(s.resumed)
		s.resumed = make(chan struct{})
	}
}

// Close stops the proxy and ends every stream through it.
func (s *HTTPProxy) Close() {
	s.StallWatches(false)
	s.Throttle(false)
	_ = s.server.Close()
}

// wait returns once no stall holds the streams, or ctx ends.
func (s *HTTPProxy) wait(ctx context.Context) {
	s.mu.Lock()
	stalled, resumed := s.stalled, s.resumed
	s.mu.Unlock()
	if !stalled {
		return
	}
	select {
	case <-resumed:
	case <-ctx.Done():
	}
}

// stallingBody holds each chunk of a watch stream it has read until no
// stall holds it: a chunk read as a stall begins is held too.
type stallingBody struct {
	io.ReadCloser
	ctx   context.Context
	proxy *HTTPProxy
}

func (b *stallingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.proxy.wait(b.ctx)
	return n, err
}

func isWatch(r *http.Request) bool {
	if r == nil {
		return false
	}
	if w := r.URL.Query().Get("watch"); w == "true" || w == "1" {
		return true
	}
	return strings.Contains(r.URL.Path, "/watch/")
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
