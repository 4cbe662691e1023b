package localcluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strings"

	"k8s.io/klog/v2"
)

// The real node's pods live on a bridge of this machine with no uplink:
// the kubelet reaches them at their addresses, and they reach the
// apiserver, which listens on loopback only, through a proxy on the
// bridge's gateway address, as pods elsewhere reach it at a node's
// address. Nothing listens on, or is routed to, an address outside this
// machine.

// startPodNetwork creates the bridge (the CNI bridge plugin takes an
// existing one) and the apiserver's proxy on its gateway.
func (c *Cluster) startPodNetwork(n *realNode) error {
	_ = exec.Command("ip", "link", "del", realNodeBridge).Run() // left by a killed run
	for _, args := range [][]string{
		{"link", "add", "name", realNodeBridge, "type", "bridge"},
		{"addr", "add", realNodeGateway + "/24", "dev", realNodeBridge},
		{"link", "set", realNodeBridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("creating the real node's bridge (ip %s): %w: %s", strings.Join(args, " "), err, out)
		}
	}
	apiServer, err := url.Parse(c.URL)
	if err != nil {
		return fmt.Errorf("parsing the apiserver's URL: %w", err)
	}
	if n.apiServerProxy, err = net.Listen("tcp", net.JoinHostPort(realNodeGateway, apiServer.Port())); err != nil {
		return fmt.Errorf("serving the apiserver to the real node's pods: %w", err)
	}
	go proxyTCP(n.apiServerProxy, apiServer.Host)
	return nil
}

func (c *Cluster) stopPodNetwork(n *realNode) {
	if n.apiServerProxy != nil {
		_ = n.apiServerProxy.Close()
	}
	if out, err := exec.Command("ip", "link", "del", realNodeBridge).CombinedOutput(); err != nil {
		klog.InfoS("Removing the real node's bridge failed", "bridge", realNodeBridge, "err", err, "output", string(out))
	}
}

// RealNodeAPIServer is where the real node's pods reach the apiserver
// (host and port, for KUBERNETES_SERVICE_HOST and _PORT); "" without a
// real node.
func (c *Cluster) RealNodeAPIServer() (host, port string) {
	if c.node == nil || c.node.apiServerProxy == nil {
		return "", ""
	}
	host, port, _ = net.SplitHostPort(c.node.apiServerProxy.Addr().String())
	return host, port
}

// proxyTCP copies every connection to target until the listener closes.
func proxyTCP(l net.Listener, target string) {
	for {
		conn, err := l.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				klog.ErrorS(err, "The apiserver's proxy for the real node stopped")
			}
			return
		}
		go func() {
			upstream, err := net.Dial("tcp", target)
			if err != nil {
				conn.Close()
				return
			}
			// Either side ending ends both.
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(upstream, conn); done <- struct{}{} }()
			go func() { _, _ = io.Copy(conn, upstream); done <- struct{}{} }()
			<-done
			conn.Close()
			upstream.Close()
		}()
	}
}
