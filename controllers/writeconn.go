package controllers

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	restclient "k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// writeTransports gives the controllers' writes connections of their own,
// whose every byte is sent only while the replica has authority.
//
// Why: the reset of a write's connection at the authority deadline
// (abandonAtDeadline) runs on a timer. A process frozen between a write's
// headers and its body (SIGSTOP, a VM stall) and resumed past the deadline
// may send the body before that timer runs, and kube-apiserver then acts
// on a write whose partition another replica already runs. Checking
// authority before each write to the socket leaves only the time between
// that check and the system call.
//
// Reads stay on the client's own transport: a connection refused for
// lack of authority is closed with everything on it, and the informers'
// watches must outlive a lapse of authority. The write connections are
// made by client-go's transport cache from the config's TLS settings and
// one dialer per replica, so every controller name with the same TLS
// settings shares one (HTTP/2) connection, whatever its token, as all
// clients do in KCM.
type writeTransports struct {
	fence  shard.Authority
	logger klog.Logger

	mu sync.Mutex
	// dials: the gated dialer made for each dialer a config brings (nil:
	// the default), reused so that client-go's cache, keyed on it, shares
	// the transport.
	dials map[*transport.DialHolder]*transport.DialHolder
}

func newWriteTransports(logger klog.Logger, fence shard.Authority) *writeTransports {
	return &writeTransports{logger: logger, fence: fence, dials: map[*transport.DialHolder]*transport.DialHolder{}}
}

// forConfig is the transport the writes of clients built from cfg go out
// on: the config's own wrappers (a controller client builder's token
// source, an exec plugin's) over a base transport with the config's
// connection settings. The credentials and user agent client-go adds from
// the config's fields are added above it, as for reads.
func (w *writeTransports) forConfig(cfg *restclient.Config) (http.RoundTripper, error) {
	tc, err := cfg.TransportConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the transport settings of a controller client: %w", err)
	}
	rt, err := transport.New(&transport.Config{
		TLS:                tc.TLS,
		Proxy:              tc.Proxy,
		DisableCompression: tc.DisableCompression,
		DialHolder:         w.gatedDial(tc.DialHolder),
	})
	if err != nil {
		return nil, fmt.Errorf("building the write transport of a controller client: %w", err)
	}
	if tc.WrapTransport != nil {
		rt = tc.WrapTransport(rt)
	}
	return rt, nil
}

func (w *writeTransports) gatedDial(inner *transport.DialHolder) *transport.DialHolder {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h, ok := w.dials[inner]; ok {
		return h
	}
	// client-go's own default dialer.
	dial := (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	if inner != nil {
		dial = inner.Dial
	}
	fence, logger := w.fence, w.logger
	h := &transport.DialHolder{Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		if !fence.Valid() {
			return nil, fmt.Errorf("dialing %s for a write: %w", address, ErrNoAuthority)
		}
		conn, err := dial(ctx, network, address)
		if err != nil {
			return nil, err
		}
		return &authorityConn{Conn: conn, fence: fence, logger: logger}, nil
	}}
	w.dials[inner] = h
	return h
}

// authorityConn is a connection (under TLS) that sends nothing once the
// replica's authority has run out: the first write refused resets it, so
// whatever the kernel still holds of earlier writes is dropped too.
type authorityConn struct {
	net.Conn
	fence  shard.Authority
	logger klog.Logger
	once   sync.Once
	// reset: this connection was reset when authority ran out.
	reset atomic.Bool
}

// resetForAuthority says whether conn (under TLS or not) is a write
// connection reset when this replica's authority ran out.
func resetForAuthority(conn net.Conn) bool {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	ac, ok := conn.(*authorityConn)
	return ok && ac.reset.Load()
}

func (c *authorityConn) Write(b []byte) (int, error) {
	if !c.fence.Valid() {
		c.once.Do(func() {
			c.reset.Store(true)
			c.logger.Info("Write connection reset: this replica's authority ran out with bytes still to send", "remote", c.RemoteAddr().String(), "bytes", len(b))
			resetConn(c.Conn)
		})
		return 0, fmt.Errorf("sending %d bytes to %s: %w", len(b), c.RemoteAddr(), ErrNoAuthority)
	}
	return c.Conn.Write(b)
}
