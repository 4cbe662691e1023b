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
	w := &inflightWrite{fence: fence, admitted: time.Now()}
	w.req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: w.gotConn}))
	_, until := fence.Authority()
	w.mu.Lock()
	w.timer = time.AfterFunc(min(time.Until(until), authorityRecheck), w.check)
	w.mu.Unlock()

	resp, err := next.RoundTrip(w.req)

	wasAbandoned := w.answer()
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

// inflightWrite is one write abandonAtDeadline watches.
type inflightWrite struct {
	req      *http.Request
	fence    shard.Authority
	admitted time.Time

	mu        sync.Mutex
	conn      net.Conn
	answered  bool
	abandoned bool
	timer     *time.Timer
}

// gotConn records the write's connection; one got after the reset (a
// retry inside the transport) goes the same way.
func (w *inflightWrite) gotConn(info httptrace.GotConnInfo) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.conn = info.Conn
	if w.abandoned {
		resetConn(w.conn)
	}
}

// check resets the write's connection if the replica's authority ran out
// before the write was answered, else looks again when it may.
func (w *inflightWrite) check() {
	ok, until := w.fence.Authority()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.answered {
		return
	}
	if ok {
		w.timer = time.AfterFunc(min(time.Until(until), authorityRecheck), w.check)
		return
	}
	w.abandoned = true
	if w.conn != nil {
		resetConn(w.conn)
	}
	klog.FromContext(w.req.Context()).Info("Write still in flight when this replica's authority ran out: its connection was reset, so what the apiserver has not received of it yet never arrives",
		"method", w.req.Method, "path", w.req.URL.Path, "admittedAgo", time.Since(w.admitted).Round(time.Millisecond), "authorityEndedAgo", -time.Until(until).Round(time.Millisecond))
}

// answer records that the write was answered and says whether its
// connection was reset for authority.
func (w *inflightWrite) answer() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.answered = true
	w.timer.Stop()
	return w.abandoned || w.conn != nil && resetForAuthority(w.conn)
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
