package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strings"
)

// The Service network of the real node's pods, as far as a controller in
// a pod needs it: the kubernetes Service. The kubelet gives every pod
// KUBERNETES_SERVICE_HOST and _PORT, the Service's ClusterIP and port,
// and rest.InClusterConfig dials them. A cluster's kube-proxy would route
// that address to the API server; the test bed has none (it would need
// iptables or nftables and own machine-wide rules), so the node answers
// for it: the address is one of the machine's (on lo: the CNI plugin owns
// the bridge's addresses), reached through the bridge, the gateway of the
// pods, and the test bed forwards each connection made to it to the API
// server. TLS is end to end: the API server's certificate names the
// address. Other Services have no address a pod can reach.
const (
	// KubernetesServiceIP is the first address of the API server's
	// --service-cluster-ip-range: the kubernetes Service's ClusterIP.
	KubernetesServiceIP   = "10.96.0.1"
	kubernetesServicePort = "443"
)

// serviceForwarder forwards connections to the kubernetes Service's
// address to the API server.
type serviceForwarder struct {
	listener net.Listener
	target   string
}

// serviceAddress is the Service's address as the machine holds it.
const serviceAddress = KubernetesServiceIP + "/32"

// serveKubernetesService gives the machine the Service's address and
// forwards connections to it to apiServer (the API server's URL). The
// node's cleaning takes the address away.
func (n *Node) serveKubernetesService(apiServer string) error {
	u, err := url.Parse(apiServer)
	if err != nil {
		return err
	}
	if out, err := exec.Command("ip", "address", "add", serviceAddress, "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("giving the machine the kubernetes Service's address %s: %w: %s", serviceAddress, err, strings.TrimSpace(string(out)))
	}
	l, err := net.Listen("tcp", net.JoinHostPort(KubernetesServiceIP, kubernetesServicePort))
	if err != nil {
		return fmt.Errorf("answering for the kubernetes Service: %w", err)
	}
	f := &serviceForwarder{listener: l, target: u.Host}
	go f.serve()
	n.service = f
	return nil
}

func (f *serviceForwarder) serve() {
	for {
		conn, err := f.listener.Accept()
		if err != nil {
			return // closed
		}
		go f.forward(conn)
	}
}

// forward copies conn to and from a new connection to the API server until
// either side closes.
func (f *serviceForwarder) forward(conn net.Conn) {
	defer conn.Close()
	var d net.Dialer
	upstream, err := d.DialContext(context.Background(), "tcp", f.target)
	if err != nil {
		return
	}
	defer upstream.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(upstream, conn)
	go pipe(conn, upstream)
	<-done
	<-done
}

// stop closes the listener. The connections it forwards end with the
// pods that made them, which the node's stop ends.
func (f *serviceForwarder) stop() {
	if f != nil {
		_ = f.listener.Close()
	}
}

// removeServiceAddress takes the kubernetes Service's address from the
// machine, if it has it.
func removeServiceAddress() error {
	out, err := exec.Command("ip", "-o", "address", "show", "dev", "lo").CombinedOutput()
	if err != nil || !strings.Contains(string(out), " "+serviceAddress+" ") {
		return nil
	}
	if out, err := exec.Command("ip", "address", "del", serviceAddress, "dev", "lo").CombinedOutput(); err != nil {
		return fmt.Errorf("taking the kubernetes Service's address %s from the machine: %w: %s", serviceAddress, err, strings.TrimSpace(string(out)))
	}
	return nil
}
