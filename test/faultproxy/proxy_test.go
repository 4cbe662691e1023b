package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}

// roundTrip writes a line and waits up to wait for it to come back.
func roundTrip(c net.Conn, r *bufio.Reader, wait time.Duration) (time.Duration, error) {
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if line != "ping\n" {
		return 0, errors.New("wrong answer " + line)
	}
	return time.Since(start), nil
}

func TestProxy(t *testing.T) {
	tests := []struct {
		name string
		// fault is applied after a first round trip succeeded.
		fault func(p *Proxy)
		// check is run with the connection opened before the fault.
		check func(t *testing.T, p *Proxy, c net.Conn, r *bufio.Reader)
	}{
		{
			name:  "pass forwards",
			fault: func(*Proxy) {},
			check: func(t *testing.T, _ *Proxy, c net.Conn, r *bufio.Reader) {
				if _, err := roundTrip(c, r, 5*time.Second); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name:  "cut resets open connections and refuses new ones",
			fault: func(p *Proxy) { p.Set(Cut) },
			check: func(t *testing.T, p *Proxy, c net.Conn, r *bufio.Reader) {
				if _, err := roundTrip(c, r, 5*time.Second); err == nil || isTimeout(err) {
					t.Fatalf("open connection: %v, want it reset", err)
				}
				fresh, err := net.Dial("tcp", p.Addr())
				if err == nil {
					defer fresh.Close()
					if _, err = roundTrip(fresh, bufio.NewReader(fresh), 5*time.Second); err == nil || isTimeout(err) {
						t.Fatalf("new connection: %v, want it reset", err)
					}
				}
			},
		},
		{
			name:  "blackhole holds traffic until it ends",
			fault: func(p *Proxy) { p.Set(Blackhole) },
			check: func(t *testing.T, p *Proxy, c net.Conn, r *bufio.Reader) {
				if _, err := roundTrip(c, r, 300*time.Millisecond); !isTimeout(err) {
					t.Fatalf("round trip in a blackhole: %v, want a timeout", err)
				}
				p.Set(Pass)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
					t.Fatalf("held line after the blackhole: %q, %v", line, err)
				}
			},
		},
		{
			name:  "latency delays each direction",
			fault: func(p *Proxy) { p.SetLatency(150*time.Millisecond, 50*time.Millisecond) },
			check: func(t *testing.T, _ *Proxy, c net.Conn, r *bufio.Reader) {
				took, err := roundTrip(c, r, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if took < 300*time.Millisecond {
					t.Fatalf("round trip took %v, want at least twice the latency", took)
				}
			},
		},
		{
			name:  "bandwidth limits",
			fault: func(p *Proxy) { p.SetBandwidth(50) },
			check: func(t *testing.T, _ *Proxy, c net.Conn, r *bufio.Reader) {
				// 5 bytes each way at 50 B/s: at least 200 ms.
				took, err := roundTrip(c, r, 5*time.Second)
				if err != nil {
					t.Fatal(err)
				}
				if took < 200*time.Millisecond {
					t.Fatalf("round trip took %v at 50 B/s", took)
				}
			},
		},
	}
	target := echoServer(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Start(target)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := bufio.NewReader(c)
			if _, err := roundTrip(c, r, 5*time.Second); err != nil {
				t.Fatalf("before the fault: %v", err)
			}
			tc.fault(p)
			tc.check(t, p, c, r)
		})
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestBlackholeHeldData: what a blackhole holds arrives when the link
// comes back if the sender only closed (FIN: its kernel still
// retransmits), and never if it reset the connection (RST: its kernel
// dropped it).
func TestBlackholeHeldData(t *testing.T) {
	for _, tc := range []struct {
		name       string
		reset      bool
		wantArrive bool
	}{
		{"sender closes", false, true},
		{"sender resets", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			received := make(chan int, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				b, _ := io.ReadAll(c)
				received <- len(b)
			}()
			p, err := Start(l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			c, err := net.Dial("tcp", p.Addr())
			if err != nil {
				t.Fatal(err)
			}
			p.Set(Blackhole)
			if _, err := c.Write([]byte("write sent into the blackhole")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if tc.reset {
				resetConn(c)
			} else {
				_ = c.Close()
			}
			time.Sleep(100 * time.Millisecond)
			p.Set(Pass)
			select {
			case n := <-received:
				if arrived := n > 0; arrived != tc.wantArrive {
					t.Fatalf("the server received %d bytes, want arrival %v", n, tc.wantArrive)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the server's connection never ended")
			}
		})
	}
}
