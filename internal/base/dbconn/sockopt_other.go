//go:build !linux

package dbconn

import (
	"syscall"
	"time"
)

// setUserTimeout is a no-op where TCP_USER_TIMEOUT does not exist; keepalive and the response
// timeout still bound the wait.
func setUserTimeout(syscall.RawConn, time.Duration) error { return nil }
