// Package faultproxy is a TCP proxy between a PostgreSQL client and server that injects network
// faults on command, for the fault gates (internal/testkit/faults). It reads the PostgreSQL wire protocol
// v3 in both directions, so a fault can be tied to a protocol event rather than to a byte count:
//
//   - DropNextCommit: the server's CommandComplete "COMMIT" is forwarded to nobody and the client
//     connection is reset. The transaction committed; the client saw only a broken connection.
//   - PartitionOnCommandTag: a partition that begins just before the server's CommandComplete
//     with a given tag would leave the proxy: the statement ran, its reply is held.
//   - Partition / Heal: both directions stop being forwarded, without an RST or a FIN: bytes in
//     flight are held (as TCP would keep retransmitting them) and delivered when the partition
//     heals, unless an endpoint has given up and closed its side by then. A client connecting
//     during a partition completes its TCP handshake with the proxy but reaches no server.
//   - PartitionOnQuery: a partition that begins just before a client's statement with a given
//     prefix would leave the proxy (its simple Query, or the Bind that executes it), so a test can
//     cut a replica off at an exact point of its protocol, also inside a pipeline.
//   - DropResponseTo: a client's statement with a given prefix runs, and the server's answer is
//     swallowed up to the end of its transaction, then the client connection is reset: the
//     commit-response loss of one exact statement, also of one that commits alone (autocommit),
//     which sends no "COMMIT" tag for DropNextCommit to see.
//
// Messages are forwarded whole, each one decided on once it is complete; an SSL or GSS
// encrypted session cannot be read and is passed through without faults.
package faultproxy

import (
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Drop describes one swallowed COMMIT response.
type Drop struct {
	Conn int       // the client connection, numbered from 1 in accept order
	At   time.Time // when the proxy swallowed it
	// Tags are the command tags the connection had received before, oldest first (at most 64):
	// what the client had been told, so a test can show what the driver observed.
	Tags []string
	// Swallowed are the command tags DropResponseTo swallowed, in order (empty for DropNextCommit).
	Swallowed []string
}

// Stats counts what went through the proxy.
type Stats struct {
	Conns          int // client connections accepted
	Commits        int // CommandComplete "COMMIT" messages seen from the server
	CommitsDropped int // of those, swallowed
	Partitions     int // partitions begun
	Unparsed       int // connections passed through unparsed (encrypted, or a malformed stream)
}

// Proxy forwards connections from its listener to one target address.
type Proxy struct {
	target string
	ln     net.Listener
	done   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once

	mu          sync.Mutex
	links       map[*link]struct{}
	partitioned bool
	healed      chan struct{} // closed when the current partition heals
	drops       []chan Drop   // armed COMMIT drops, oldest first
	traps       []trap        // on client statements
	tagTraps    []trap        // on server command tags
	respDrops   []respDrop    // on client statements: swallow their answer
	stats       Stats
}

type trap struct {
	prefix string
	fired  chan struct{}
}

type respDrop struct {
	prefix string
	ch     chan Drop
}

// Start listens on a free loopback port and forwards every connection to target (host:port).
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, done: make(chan struct{}), links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's listening port.
func (p *Proxy) Port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// Stats returns a copy of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// DropNextCommit arms one fault: the next CommandComplete "COMMIT" any server connection sends
// is swallowed, with everything after it, and that client connection is reset (RST). The
// channel receives the Drop once it happened. Arming twice drops the next two.
func (p *Proxy) DropNextCommit() <-chan Drop {
	ch := make(chan Drop, 1)
	p.mu.Lock()
	p.drops = append(p.drops, ch)
	p.mu.Unlock()
	return ch
}

// PartitionOnQuery arms a partition that begins when a client is about to execute SQL that starts
// with prefix (case-insensitive, leading space ignored): a simple Query, or a Bind of a statement
// whose Parse carried that SQL (a Parse alone only prepares it). That message and everything
// after it are held; what the client sent before it, in the same write, is delivered. So a
// pipeline (pgx batches: BEGIN, a query and COMMIT sent at once) can be cut between two of its
// statements. The channel is closed when the partition begins.
func (p *Proxy) PartitionOnQuery(prefix string) <-chan struct{} {
	ch := make(chan struct{})
	p.mu.Lock()
	p.traps = append(p.traps, trap{prefix: strings.ToLower(prefix), fired: ch})
	p.mu.Unlock()
	return ch
}

// PartitionOnCommandTag arms a partition that begins when a server is about to send a
// CommandComplete whose tag starts with prefix ("COMMIT", "UPDATE"): the statement ran, its reply
// is held with everything after it. The channel is closed when the partition begins.
func (p *Proxy) PartitionOnCommandTag(prefix string) <-chan struct{} {
	ch := make(chan struct{})
	p.mu.Lock()
	p.tagTraps = append(p.tagTraps, trap{prefix: prefix, fired: ch})
	p.mu.Unlock()
	return ch
}

// DropResponseTo arms one fault on the first client statement whose SQL starts with prefix
// (matched as PartitionOnQuery matches): the statement reaches the server, and everything the
// server sends on that connection from then on is swallowed up to and including the
// ReadyForQuery that reports the transaction ended (idle), after which the client connection is
// reset (RST). So the statement's transaction committed (or, had it failed, rolled back: the
// swallowed tags tell) and the client saw only a broken connection. Meant for a client that
// waits for each answer before it sends on (not a pipeline). The channel receives the Drop.
func (p *Proxy) DropResponseTo(prefix string) <-chan Drop {
	ch := make(chan Drop, 1)
	p.mu.Lock()
	p.respDrops = append(p.respDrops, respDrop{prefix: strings.ToLower(prefix), ch: ch})
	p.mu.Unlock()
	return ch
}

// Partition stops forwarding in both directions, on every connection, until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partitionLocked()
}

func (p *Proxy) partitionLocked() {
	if !p.partitioned {
		p.partitioned = true
		p.healed = make(chan struct{})
		p.stats.Partitions++
	}
}

// Heal ends a partition: held bytes are delivered, in order, to endpoints still listening.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.partitioned {
		p.partitioned = false
		close(p.healed)
	}
}

// Partitioned says whether a partition is in force.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.partitioned
}

// Close stops listening, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	var err error
	p.once.Do(func() {
		close(p.done)
		err = p.ln.Close()
		p.mu.Lock()
		for l := range p.links {
			l.close()
		}
		p.mu.Unlock()
	})
	p.wg.Wait()
	return err
}

var errClosed = errors.New("faultproxy: closed")

// gate returns once no partition is in force (or the proxy is closing).
func (p *Proxy) gate() error {
	for {
		p.mu.Lock()
		if !p.partitioned {
			p.mu.Unlock()
			return nil
		}
		healed := p.healed
		p.mu.Unlock()
		select {
		case <-healed:
		case <-p.done:
			return errClosed
		}
	}
}

// forward writes b to dst once no partition holds it back.
func (p *Proxy) forward(dst net.Conn, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := p.gate(); err != nil {
		return err
	}
	_, err := dst.Write(b)
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.stats.Conns++
		id := p.stats.Conns
		p.mu.Unlock()
		p.wg.Add(1)
		go p.serve(id, c)
	}
}

func (p *Proxy) serve(id int, client net.Conn) {
	defer p.wg.Done()
	// During a partition the server is unreachable: hold the client until it heals.
	if err := p.gate(); err != nil {
		client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		client.Close()
		return
	}
	l := &link{id: id, p: p, client: client, server: server}
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		l.close()
		return
	default:
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.upstream() }()
	go func() { defer wg.Done(); l.downstream() }()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// takeDrop consumes one armed COMMIT drop, or returns nil.
func (p *Proxy) takeDrop() chan Drop {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Commits++
	if len(p.drops) == 0 {
		return nil
	}
	ch := p.drops[0]
	p.drops = p.drops[1:]
	p.stats.CommitsDropped++
	return ch
}

// takeTrap consumes the first armed query trap that sql matches.
func (p *Proxy) takeTrap(sql string) (chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sql = strings.ToLower(strings.TrimSpace(sql))
	for i, t := range p.traps {
		if strings.HasPrefix(sql, t.prefix) {
			p.traps = append(p.traps[:i:i], p.traps[i+1:]...)
			return t.fired, true
		}
	}
	return nil, false
}

// takeRespDrop consumes the first armed response drop that sql matches.
func (p *Proxy) takeRespDrop(sql string) (chan Drop, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sql = strings.ToLower(strings.TrimSpace(sql))
	for i, d := range p.respDrops {
		if strings.HasPrefix(sql, d.prefix) {
			p.respDrops = append(p.respDrops[:i:i], p.respDrops[i+1:]...)
			return d.ch, true
		}
	}
	return nil, false
}

// takeTagTrap consumes the first armed command-tag trap that tag matches.
func (p *Proxy) takeTagTrap(tag string) (chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, t := range p.tagTraps {
		if strings.HasPrefix(tag, t.prefix) {
			p.tagTraps = append(p.tagTraps[:i:i], p.tagTraps[i+1:]...)
			return t.fired, true
		}
	}
	return nil, false
}

func (p *Proxy) countUnparsed() {
	p.mu.Lock()
	p.stats.Unparsed++
	p.mu.Unlock()
}

// link is one proxied client connection.
type link struct {
	id             int
	p              *Proxy
	client, server net.Conn
	single         atomic.Int32              // one-byte negotiation answers the server still owes
	raw            atomic.Bool               // pass through unparsed from now on
	tags           []string                  // written by downstream only
	statements     statements                // written by upstream only
	respDrop       atomic.Pointer[chan Drop] // set by upstream: downstream swallows from now on
	closeOnce      sync.Once
}

func (l *link) close() {
	l.closeOnce.Do(func() {
		l.client.Close()
		l.server.Close()
	})
}

// reset closes the client side with an RST (no FIN) and the server side normally.
func (l *link) reset() {
	if tc, ok := l.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	l.close()
}

func (l *link) passThrough() {
	if !l.raw.Swap(true) {
		l.p.countUnparsed()
	}
}

// upstream forwards the client's messages to the server.
func (l *link) upstream() {
	defer l.close()
	var fr frontendFramer
	buf := make([]byte, 0, 16<<10)
	chunk := make([]byte, 32<<10)
	for {
		n, rerr := l.client.Read(chunk)
		buf = append(buf, chunk[:n]...)
		out := 0 // buf[:out] is decided: forward it
		for !l.raw.Load() {
			m, ok, err := fr.next(buf[out:])
			if err != nil {
				l.passThrough()
				break
			}
			if !ok {
				break
			}
			if code := startupCode(m); code == sslRequestCode || code == gssencRequestCode {
				l.single.Add(1) // before it leaves: the answer may come back at once
			}
			if sql, executes := l.statements.executes(m); executes {
				if ch, armed := l.p.takeRespDrop(sql); armed {
					l.respDrop.Store(&ch) // before the statement leaves: its answer cannot overtake
				}
				if fired, trapped := l.p.takeTrap(sql); trapped {
					// what precedes the query still gets through; the query is held
					if err := l.p.forward(l.server, buf[:out]); err != nil {
						return
					}
					buf = append(buf[:0], buf[out:]...)
					out = 0
					l.p.Partition()
					close(fired)
				}
			}
			out += m.size
		}
		if l.raw.Load() {
			out = len(buf)
		}
		if err := l.p.forward(l.server, buf[:out]); err != nil {
			return
		}
		buf = append(buf[:0], buf[out:]...)
		if rerr != nil {
			return
		}
	}
}

// downstream forwards the server's messages to the client.
func (l *link) downstream() {
	defer l.close()
	var fr backendFramer
	var swallowed []string
	buf := make([]byte, 0, 16<<10)
	chunk := make([]byte, 32<<10)
	for {
		n, rerr := l.server.Read(chunk)
		buf = append(buf, chunk[:n]...)
		out := 0
		for !l.raw.Load() {
			m, ok, err := fr.next(buf[out:], l.single.Load() > 0)
			if err != nil {
				l.passThrough()
				break
			}
			if !ok {
				break
			}
			if m.typ == 0 { // the one-byte answer to SSLRequest / GSSENCRequest
				l.single.Add(-1)
				if b := m.body[0]; b == 'S' || b == 'G' {
					l.passThrough() // encrypted from here on
				}
			}
			if ch := l.respDrop.Load(); ch != nil {
				if tag, ok := commandTag(m); ok {
					swallowed = append(swallowed, tag)
				}
				if m.typ == 'Z' && len(m.body) == 1 && m.body[0] == 'I' {
					_ = l.p.forward(l.client, buf[:out])
					l.reset()
					*ch <- Drop{Conn: l.id, At: time.Now(), Tags: append([]string(nil), l.tags...), Swallowed: swallowed}
					return
				}
				buf = append(buf[:out], buf[out+m.size:]...) // swallowed
				continue
			}
			if tag, ok := commandTag(m); ok {
				if tag == "COMMIT" {
					if ch := l.p.takeDrop(); ch != nil {
						_ = l.p.forward(l.client, buf[:out])
						l.reset()
						ch <- Drop{Conn: l.id, At: time.Now(), Tags: append([]string(nil), l.tags...)}
						return
					}
				}
				if fired, trapped := l.p.takeTagTrap(tag); trapped {
					if err := l.p.forward(l.client, buf[:out]); err != nil {
						return
					}
					buf = append(buf[:0], buf[out:]...)
					out = 0
					l.p.Partition()
					close(fired)
				}
				if len(l.tags) == 64 {
					l.tags = append(l.tags[:0], l.tags[1:]...)
				}
				l.tags = append(l.tags, tag)
			}
			out += m.size
		}
		if l.raw.Load() {
			out = len(buf)
		}
		if err := l.p.forward(l.client, buf[:out]); err != nil {
			return
		}
		buf = append(buf[:0], buf[out:]...)
		if rerr != nil {
			return
		}
	}
}
