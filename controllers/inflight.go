package controllers

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/fleet-controller-manager/fleet-controller-manager/shard"
)

// authorityRecheck bounds how long a write in flight goes without its
// authority being checked again: authority can also be voided before its
// deadline (kube-controller-manager's leader Lease seen taken).
const authorityRecheck = 500 * time.Millisecond

// abandonAtDeadline sends a write and, should the replica's authority run
// out while the write is still unanswered, resets the connection it went
// out on.
//
// Why: a write sent just before a network cut is not lost, it waits. Its
// bytes sit in this host's send buffer (TCP retransmits them for minutes)
// or in a proxy on the way, and reach kube-apiserver when the link comes
// back, after another replica took the partition over. Cancelling the
// request does not help: HTTP/2 sends a reset of the stream behind the
// request's own bytes. Closing the TCP connection with RST (linger 0)
// makes the kernel drop whatever it has not delivered, so after the
// deadline nothing this host still holds can arrive, and the piece's
// write gate, which waits for its writes in flight, drains at once. Bytes
// already past it (in a proxy, or read by the apiserver) can still be
// handled after the deadline; no other replica may take the piece until
// the lease runs out, a lease duration after the last renewal, 5 s after
// the deadline with the defaults.
// Without it a blackholed link holds a stopped piece's writes until
// HTTP/2's health check gives up on the connection, well after another
// replica may have started the piece (TestNetworkCutWithControllers).
func abandonAtDeadline(req *http.Request, fence shard.Authority, next http.RoundTripper) (*http.Response, error) {
	admitted := time.Now()
	var (
		mu        sync.Mutex
		conn      net.Conn
		answered  bool
		abandoned bool
	)
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		mu.Lock()
		defer mu.Unlock()
		conn = info.Conn
		// A connection got after the reset (a retry inside the
		// transport) goes the same way.
		if abandoned {
			resetConn(conn)
		}
	}}
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))

	var timer *time.Timer
	var check func()
	check = func() {
		ok, until := fence.Authority()
		mu.Lock()
		defer mu.Unlock()
		if answered {
			return
		}
		if ok {
			timer = time.AfterFunc(min(time.Until(until), authorityRecheck), check)
			return
		}
		abandoned = true
		if conn != nil {
			resetConn(conn)
		}
		klog.FromContext(req.Context()).Info("Write still in flight when this replica's authority ran out: its connection was reset, so what the apiserver has not received of it yet never arrives",
			"method", req.Method, "path", req.URL.Path, "admittedAgo", time.Since(admitted).Round(time.Millisecond), "authorityEndedAgo", -time.Until(until).Round(time.Millisecond))
	}
	_, until := fence.Authority()
	mu.Lock()
	timer = time.AfterFunc(min(time.Until(until), authorityRecheck), check)
	mu.Unlock()

	resp, err := next.RoundTrip(req)

	mu.Lock()
	answered = true
	timer.Stop()
	wasAbandoned := abandoned || conn != nil && resetForAuthority(conn)
	mu.Unlock()
	if err != nil {
		if ok, _ := fence.Authority(); wasAbandoned || !ok {
			// Its connection was reset here (this check, or the write
			// transport's), not by the apiserver: say so, rather than
			// "use of closed network connection".
			return nil, fmt.Errorf("%w: %w", ErrWriteAbandoned, err)
		}
	}
	// Answered despite a reset: the apiserver acted before the deadline.
	return resp, err
}

// ErrWriteAbandoned is returned for a write whose connection this
// replica reset when its authority ran out before the apiserver answered:
// the apiserver may or may not have acted on it.
var ErrWriteAbandoned = errors.New("this replica's fleet authority ran out with the write in flight; its connection was reset")

// resetConn closes the TCP connection under conn (TLS or not) with RST,
// dropping what the kernel has not delivered yet.
func resetConn(conn net.Conn) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	if ac, ok := conn.(*authorityConn); ok {
		conn = ac.Conn
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}
