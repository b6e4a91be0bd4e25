package cluster

import (
	"fmt"
	"net"
	"strconv"
	"sync"
)

var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreeAddr returns a loopback address with a port nothing listens on, for a
// server another process will start. The kernel may offer a port it just
// offered again once the probe closes, so ports already handed out by this
// process are never returned twice: two components started one after the
// other cannot be given the same port.
func FreeAddr() (string, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
		}
	}
	return "", fmt.Errorf("no free port found")
}

func freePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	return strconv.Atoi(port)
}
