package dbconn

import (
	"net"
	"syscall"
	"testing"
	"time"
)

// The dialer sets TCP_USER_TIMEOUT and keepalive on the client's socket.
func TestDialerSetsSocketOptions(t *testing.T) {
	to := DefaultTimeouts()
	to.UserTimeout = 7 * time.Second
	c := dialWith(t, to, silentServer(t))
	raw := c.(*responseConn).Conn.(*net.TCPConn)
	rc, err := raw.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var userTimeout, keepAlive, idle int
	_ = rc.Control(func(fd uintptr) {
		userTimeout, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpUserTimeout)
		keepAlive, _ = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		idle, _ = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE)
	})
	if userTimeout != 7000 || keepAlive != 1 || idle != 10 {
		t.Errorf("TCP_USER_TIMEOUT %d ms, SO_KEEPALIVE %d, TCP_KEEPIDLE %d s; want 7000, 1, 10", userTimeout, keepAlive, idle)
	}
}
