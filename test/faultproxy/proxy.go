// Package faultproxy is a TCP proxy on loopback that tests put between a
// fleet replica and kube-apiserver to inject network faults: cut (reset
// every connection and refuse new ones), blackhole (accept and never
// answer; connections stay open and silent), latency with jitter, and a
// bandwidth limit. TLS passes through untouched, so the replica still
// verifies the apiserver's certificate. HTTPProxy, an HTTPS proxy, can
// freeze a client's watch streams while its other requests flow.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Fault is what the proxy does with traffic: pass it, or one of the
// faults it injects.
type Fault int

const (
	// Pass forwards traffic, with the configured latency and bandwidth.
	Pass Fault = iota
	// Cut resets every open connection and every new one.
	Cut
	// Blackhole keeps connections open and accepts new ones but forwards
	// nothing in either direction: the peer sees a link that went silent.
	Blackhole
)

func (m Fault) String() string {
	switch m {
	case Pass:
		return "pass"
	case Cut:
		return "cut"
	case Blackhole:
		return "blackhole"
	}
	return fmt.Sprintf("Fault(%d)", int(m))
}

// Proxy forwards connections from its loopback address to a target.
type Proxy struct {
	listener net.Listener
	target   string

	mu      sync.Mutex
	mode    Fault
	latency time.Duration
	jitter  time.Duration
	// bytesPerSecond limits each direction of each connection; 0: none.
	bytesPerSecond int
	// changed is closed and replaced whenever the settings change, so
	// copies waiting in Blackhole resume.
	changed chan struct{}
	conns   map[*pair]struct{}
	closed  bool
}

type pair struct{ client, server net.Conn }

// Start listens on a free loopback port and forwards to target
// ("127.0.0.1:6443").
func Start(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy listening: %w", err)
	}
	p := &Proxy{listener: l, target: target, changed: make(chan struct{}), conns: map[*pair]struct{}{}}
	go p.accept()
	return p, nil
}

// Addr is the proxy's address ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.listener.Addr().String() }

// Set changes the mode; Cut resets the connections open now.
func (p *Proxy) Set(m Fault) {
	p.mu.Lock()
	p.mode = m
	var reset []*pair
	if m == Cut {
		for c := range p.conns {
			reset = append(reset, c)
		}
	}
	p.notifyLocked()
	p.mu.Unlock()
	for _, c := range reset {
		c.reset()
	}
	klog.InfoS("Fault proxy", "addr", p.Addr(), "mode", m, "reset", len(reset))
}

// SetLatency delays every chunk forwarded by latency plus a uniform random
// share of jitter.
func (p *Proxy) SetLatency(latency, jitter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency, p.jitter = latency, jitter
	p.notifyLocked()
}

// SetBandwidth limits each direction of each connection to bytesPerSecond
// (0: no limit).
func (p *Proxy) SetBandwidth(bytesPerSecond int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bytesPerSecond = bytesPerSecond
	p.notifyLocked()
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[*pair]struct{}{}
	p.notifyLocked()
	p.mu.Unlock()
	_ = p.listener.Close()
	for c := range conns {
		c.reset()
	}
}

func (p *Proxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

type settings struct {
	closed         bool
	mode           Fault
	latency        time.Duration
	jitter         time.Duration
	bytesPerSecond int
	changed        <-chan struct{}
}

func (p *Proxy) settings() settings {
	p.mu.Lock()
	defer p.mu.Unlock()
	return settings{p.closed, p.mode, p.latency, p.jitter, p.bytesPerSecond, p.changed}
}

func (p *Proxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				klog.ErrorS(err, "Fault proxy stopped accepting", "addr", p.Addr())
			}
			return
		}
		go p.serve(client)
	}
}

func (p *Proxy) serve(client net.Conn) {
	if p.settings().mode == Cut {
		resetConn(client)
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		klog.ErrorS(err, "Fault proxy could not reach its target", "target", p.target)
		resetConn(client)
		return
	}
	c := &pair{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.reset()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Go(func() { p.copy(server, client) })
	wg.Go(func() { p.copy(client, server) })
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.reset()
}

// chunk is what one read returned, due for forwarding at due.
type chunk struct {
	data []byte
	due  time.Time
	err  error // the read's error, after data
}

// copy forwards src to dst: a reader stamps each chunk with the latency
// current when it was read (so latency delays, it does not throttle), a
// writer holds it until then and applies blackhole, cut and bandwidth.
// It ends when either side closes.
//
// What a blackhole holds is what a real link's sender would still be
// retransmitting: it arrives when the link comes back, unless the sender
// reset the connection meanwhile (a RST, not a FIN), in which case the
// sender's kernel dropped it and it never arrives.
func (p *Proxy) copy(dst, src net.Conn) {
	chunks := make(chan chunk, 256)
	aborted := make(chan struct{})
	go func() {
		defer close(chunks)
		var last time.Time
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if err != nil && !errors.Is(err, io.EOF) {
				close(aborted)
			}
			s := p.settings()
			due := time.Now().Add(s.latency)
			if s.jitter > 0 {
				due = due.Add(rand.N(s.jitter))
			}
			// A TCP stream is never reordered.
			if due.Before(last) {
				due = last
			}
			last = due
			chunks <- chunk{data: buf[:n], due: due, err: err}
			if err != nil {
				return
			}
		}
	}()
	for c := range chunks {
		if len(c.data) > 0 && !p.forward(dst, c, aborted) {
			resetConn(src)
			// The receiver learns of it when the link lets its next
			// packet through and draws a RST.
			p.untilLinkBack()
			resetConn(dst)
			break
		}
		if c.err != nil {
			// Half-close so the other direction drains, as a TCP peer
			// would see a FIN.
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(c.err, io.EOF) {
				_ = tc.CloseWrite()
			} else {
				resetConn(dst)
			}
			break
		}
	}
	for range chunks {
	}
}

// forward writes c to dst once the settings allow it: held while the
// proxy is in Blackhole, dropped (and the connection ended) when Cut or
// when the sender reset the connection before it was delivered.
func (p *Proxy) forward(dst net.Conn, c chunk, aborted <-chan struct{}) bool {
	for {
		s := p.settings()
		if s.closed {
			return false
		}
		select {
		case <-aborted:
			return false
		default:
		}
		switch s.mode {
		case Cut:
			return false
		case Blackhole:
			select {
			case <-s.changed:
			case <-aborted:
			}
			continue
		}
		delay := time.Until(c.due)
		if s.bytesPerSecond > 0 {
			delay += time.Duration(float64(len(c.data)) / float64(s.bytesPerSecond) * float64(time.Second))
		}
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-s.changed:
				// A fault began or ended meanwhile: decide again.
				continue
			case <-aborted:
				return false
			}
		}
		_, err := dst.Write(c.data)
		return err == nil
	}
}

// untilLinkBack returns once the proxy is not (or no longer) a blackhole.
func (p *Proxy) untilLinkBack() {
	for {
		s := p.settings()
		if s.closed || s.mode != Blackhole {
			return
		}
		<-s.changed
	}
}

func (c *pair) reset() {
	resetConn(c.client)
	resetConn(c.server)
}

// resetConn closes with RST rather than FIN, as a broken link or a
// firewall rejecting the connection would.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
