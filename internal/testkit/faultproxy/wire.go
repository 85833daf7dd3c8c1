package faultproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
)

// PostgreSQL wire protocol v3 framing, as much as the proxy needs to find message boundaries.
// After start-up every message is a type byte and an int32 length that counts itself but not the
// type. The frontend's first message (StartupMessage, SSLRequest, GSSENCRequest, CancelRequest)
// has no type byte; an SSLRequest or GSSENCRequest is answered by the server with a single byte
// ('N': go on in plain text; 'S'/'G': an encrypted stream follows, which the proxy cannot read).

const (
	sslRequestCode    = 80877103
	gssencRequestCode = 80877104
	cancelRequestCode = 80877102
	maxMessageLen     = 1 << 30 // the server's own limit; anything larger is a broken stream
)

var errBadFrame = errors.New("faultproxy: malformed PostgreSQL message length")

// message is one complete protocol message inside a buffer.
type message struct {
	typ  byte   // 0 for an untyped start-up message or a single-byte negotiation answer
	body []byte // without type and length
	size int    // bytes the message takes in the stream
}

// frontendFramer splits the client's stream.
type frontendFramer struct {
	started bool // the StartupMessage has been seen: every later message is typed
}

// next returns the first complete message of buf, ok=false when buf does not hold one yet.
func (f *frontendFramer) next(buf []byte) (message, bool, error) {
	if !f.started {
		if len(buf) < 8 {
			return message{}, false, nil
		}
		n := int(binary.BigEndian.Uint32(buf))
		if n < 8 || n > maxMessageLen {
			return message{}, false, errBadFrame
		}
		if len(buf) < n {
			return message{}, false, nil
		}
		code := binary.BigEndian.Uint32(buf[4:])
		if code != sslRequestCode && code != gssencRequestCode && code != cancelRequestCode {
			f.started = true
		}
		return message{body: buf[4:n], size: n}, true, nil
	}
	return typed(buf)
}

// startupCode is the request code of an untyped start-up message.
func startupCode(m message) uint32 {
	if m.typ != 0 || len(m.body) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(m.body)
}

// backendFramer splits the server's stream.
type backendFramer struct{}

// next returns the first complete message of buf. single says that the next byte is the
// one-byte answer to an SSLRequest or GSSENCRequest.
func (backendFramer) next(buf []byte, single bool) (message, bool, error) {
	if single {
		if len(buf) < 1 {
			return message{}, false, nil
		}
		return message{body: buf[:1], size: 1}, true, nil
	}
	return typed(buf)
}

func typed(buf []byte) (message, bool, error) {
	if len(buf) < 5 {
		return message{}, false, nil
	}
	n := int(binary.BigEndian.Uint32(buf[1:]))
	if n < 4 || n > maxMessageLen {
		return message{}, false, errBadFrame
	}
	if len(buf) < 1+n {
		return message{}, false, nil
	}
	return message{typ: buf[0], body: buf[5 : 1+n], size: 1 + n}, true, nil
}

// commandTag is the tag of a CommandComplete ('C') message: "COMMIT", "UPDATE 1", "BEGIN" …
func commandTag(m message) (string, bool) {
	if m.typ != 'C' {
		return "", false
	}
	return cString(m.body), true
}

// queryText is the SQL of a simple Query ('Q') or of a Parse ('P': statement name, then SQL).
func queryText(m message) (string, bool) {
	switch m.typ {
	case 'Q':
		return cString(m.body), true
	case 'P':
		if i := bytes.IndexByte(m.body, 0); i >= 0 {
			return cString(m.body[i+1:]), true
		}
	}
	return "", false
}

// statements remembers the SQL of a client's prepared statements (Parse: name, SQL), so that a
// Bind (portal name, statement name, …) can be told what it executes.
type statements map[string]string

// executes returns the SQL a frontend message starts executing: a simple Query's text, or the
// prepared SQL a Bind refers to. It records Parse messages as it sees them.
func (s *statements) executes(m message) (string, bool) {
	switch m.typ {
	case 'Q':
		return cString(m.body), true
	case 'P':
		if *s == nil {
			*s = statements{}
		}
		name := cString(m.body)
		sql, _ := queryText(m)
		if len(*s) >= 4096 { // bound the memory of a long-lived connection
			clear(*s)
		}
		(*s)[name] = sql
	case 'B':
		if i := bytes.IndexByte(m.body, 0); i >= 0 {
			sql, ok := (*s)[cString(m.body[i+1:])]
			return sql, ok
		}
	}
	return "", false
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
