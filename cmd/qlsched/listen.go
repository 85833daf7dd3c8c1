package main

import (
	"errors"
	"net"
	"syscall"

	"github.com/qlcontrol/controlcore/internal/app/cli"
)

// listen binds the address of flag (--http-addr, --listen) before any connection is opened. A
// taken address is bad configuration (exit 2), most often a second replica on the same host
// with the default port, so the error says how to pick another.
func listen(flag, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		host, _, _ := net.SplitHostPort(addr)
		return nil, cli.Usagef("%s %s: the address is taken (another qlsched on this host?): give each process its own %s: "+
			"another port, or port 0 for any free port, logged at start (%s %s): %v", flag, addr, flag, flag, net.JoinHostPort(host, "0"), err)
	}
	if err != nil {
		return nil, cli.Usagef("%s %s: %v", flag, addr, err)
	}
	return ln, nil
}
