package faultproxy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

// Wire helpers: the byte sequences a PostgreSQL client and server exchange.

func typedMsg(typ byte, body ...[]byte) []byte {
	b := bytes.Join(body, nil)
	out := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(4+len(b)))
	return append(out, b...)
}

func cstr(s string) []byte { return append([]byte(s), 0) }

func untyped(code uint32, rest []byte) []byte {
	out := make([]byte, 8, 8+len(rest))
	binary.BigEndian.PutUint32(out, uint32(8+len(rest)))
	binary.BigEndian.PutUint32(out[4:], code)
	return append(out, rest...)
}

func startupMsg() []byte {
	return untyped(196608, bytes.Join([][]byte{cstr("user"), cstr("u"), cstr("")}, nil))
}
func query(sql string) []byte    { return typedMsg('Q', cstr(sql)) }
func complete(tag string) []byte { return typedMsg('C', cstr(tag)) }
func ready(status byte) []byte   { return typedMsg('Z', []byte{status}) }
func authOK() []byte             { return typedMsg('R', []byte{0, 0, 0, 0}) }
func dataRow(payload string) []byte {
	return typedMsg('D', []byte{0, 1, 0, 0, 0, byte(len(payload))}, []byte(payload))
}
func parse(name, sql string) []byte { return typedMsg('P', cstr(name), cstr(sql), []byte{0, 0}) }
func errorResp(code string) []byte  { return typedMsg('E', []byte{'C'}, cstr(code), []byte{0}) }
func sslRequest() []byte            { return untyped(sslRequestCode, nil) }
func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func deadline() time.Time           { return time.Now().Add(5 * time.Second) }
func shortDeadline() time.Time      { return time.Now().Add(300 * time.Millisecond) }
func writeAll(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// fakeServer accepts connections and hands each to handle.
// srvRead and srvWrite are the fake server's I/O: a test may end while its server still runs, so
// they report nothing.
func srvRead(c net.Conn, n int) bool {
	_ = c.SetReadDeadline(deadline())
	_, err := io.ReadFull(c, make([]byte, n))
	_ = c.SetReadDeadline(time.Time{})
	return err == nil
}

func srvWrite(c net.Conn, b []byte) { _, _ = c.Write(b) }

func fakeServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
	return ln.Addr().String()
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, p *Proxy) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_ = c.SetReadDeadline(deadline())
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	return b
}

func TestFramers(t *testing.T) {
	t.Parallel()
	var fe frontendFramer
	stream := concat(sslRequest(), startupMsg(), query("commit"), parse("s1", "SELECT 1"))
	var got []string
	for off := 0; off < len(stream); {
		m, ok, err := fe.next(stream[off:])
		if err != nil || !ok {
			t.Fatalf("frontend framer at %d: ok=%v err=%v", off, ok, err)
		}
		sql, _ := queryText(m)
		label := "0"
		if m.typ != 0 {
			label = string(m.typ)
		}
		got = append(got, label+":"+sql)
		off += m.size
	}
	if want := []string{"0:", "0:", "Q:commit", "P:SELECT 1"}; !slices.Equal(got, want) {
		t.Errorf("frontend messages %q, want %q", got, want)
	}
	// every proper prefix of a message is incomplete, never an error
	full := complete("COMMIT")
	for i := range len(full) {
		if _, ok, err := (backendFramer{}).next(full[:i], false); ok || err != nil {
			t.Errorf("prefix of %d bytes: ok=%v err=%v", i, ok, err)
		}
	}
	m, ok, _ := (backendFramer{}).next(full, false)
	if tag, isTag := commandTag(m); !ok || !isTag || tag != "COMMIT" {
		t.Errorf("tag %q", tag)
	}
	if _, _, err := (backendFramer{}).next([]byte{'C', 0, 0, 0, 2}, false); !errors.Is(err, errBadFrame) {
		t.Errorf("length 2: %v, want errBadFrame", err)
	}
}

// The server's messages reach the client byte for byte, however the server chunks them.
func TestForwardsAcrossArbitraryChunks(t *testing.T) {
	t.Parallel()
	stream := concat(authOK(), ready('I'), dataRow("hello"), complete("SELECT 1"), complete("COMMIT"), ready('I'))
	addr := fakeServer(t, func(c net.Conn) {
		srvRead(c, len(startupMsg()))
		for _, b := range stream { // one byte per write
			if _, err := c.Write([]byte{b}); err != nil {
				return
			}
			time.Sleep(time.Millisecond) // force separate segments
		}
		io.Copy(io.Discard, c)
	})
	p := startProxy(t, addr)
	c := dial(t, p)
	srvWrite(c, startupMsg())
	if got := readN(t, c, len(stream)); !bytes.Equal(got, stream) {
		t.Errorf("client got %x, want %x", got, stream)
	}
	if s := p.Stats(); s.Commits != 1 || s.CommitsDropped != 0 {
		t.Errorf("stats %+v, want 1 commit seen, none dropped", s)
	}
}

// An armed drop swallows exactly the COMMIT response and resets the client; what came before is
// delivered, a ROLLBACK tag is not a COMMIT, and the next COMMIT passes again.
func TestDropNextCommit(t *testing.T) {
	t.Parallel()
	serverSawEOF := make(chan struct{})
	addr := fakeServer(t, func(c net.Conn) {
		srvRead(c, len(startupMsg()))
		srvWrite(c, concat(authOK(), ready('I')))
		for _, reply := range [][]byte{
			concat(complete("BEGIN"), ready('T')),
			concat(complete("ROLLBACK"), ready('I')),
			concat(complete("COMMIT"), ready('I')),
		} {
			if _, err := c.Read(make([]byte, 64)); err != nil {
				return
			}
			srvWrite(c, reply)
		}
		_ = c.SetReadDeadline(deadline())
		if _, err := c.Read(make([]byte, 1)); err != nil {
			close(serverSawEOF)
		}
	})
	p := startProxy(t, addr)
	dropped := p.DropNextCommit()
	c := dial(t, p)
	srvWrite(c, startupMsg())
	readN(t, c, len(authOK())+len(ready('I')))
	srvWrite(c, query("begin"))
	if got, want := readN(t, c, len(complete("BEGIN"))+len(ready('T'))), concat(complete("BEGIN"), ready('T')); !bytes.Equal(got, want) {
		t.Fatalf("begin reply %x", got)
	}
	srvWrite(c, query("rollback")) // a ROLLBACK tag passes
	readN(t, c, len(complete("ROLLBACK"))+len(ready('I')))
	srvWrite(c, query("commit"))
	_ = c.SetReadDeadline(deadline())
	n, err := c.Read(make([]byte, 64))
	if n != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after COMMIT: read %d bytes, err %v; want nothing and ECONNRESET", n, err)
	}
	select {
	case d := <-dropped:
		if !slices.Equal(d.Tags, []string{"BEGIN", "ROLLBACK"}) || d.Conn != 1 {
			t.Errorf("drop %+v, want conn 1 after tags BEGIN, ROLLBACK", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no drop event")
	}
	select {
	case <-serverSawEOF:
	case <-time.After(5 * time.Second):
		t.Error("the server side was not closed")
	}
	if s := p.Stats(); s.Commits != 1 || s.CommitsDropped != 1 {
		t.Errorf("stats %+v", s)
	}
}

// A partition holds bytes in both directions without closing anything; healing delivers them in
// order. A connection opened during the partition reaches the server only after it heals.
func TestPartitionHoldsAndHeals(t *testing.T) {
	t.Parallel()
	received := make(chan []byte, 10)
	accepted := make(chan struct{}, 10)
	addr := fakeServer(t, func(c net.Conn) {
		accepted <- struct{}{}
		srvRead(c, len(startupMsg()))
		for {
			b := make([]byte, 256)
			n, err := c.Read(b)
			if n > 0 {
				received <- b[:n]
				srvWrite(c, complete(fmt.Sprint(n))) // answer with the byte count
			}
			if err != nil {
				return
			}
		}
	})
	p := startProxy(t, addr)
	c := dial(t, p)
	srvWrite(c, concat(startupMsg(), query("before")))
	<-accepted
	if got, want := readN(t, c, len(complete("12"))), complete("12"); !bytes.Equal(got, want) {
		t.Fatalf("answer %x, want %x", got, want)
	}
	<-received
	p.Partition()
	srvWrite(c, query("during-the-partition"))
	late := dial(t, p) // a new connection during the partition
	writeAll(t, late, startupMsg())
	select {
	case b := <-received:
		t.Fatalf("server received %q during the partition", b)
	case <-accepted:
		t.Fatal("a connection reached the server during the partition")
	case <-time.After(300 * time.Millisecond):
	}
	_ = c.SetReadDeadline(shortDeadline())
	if n, err := c.Read(make([]byte, 8)); n != 0 || !os.IsTimeout(err) {
		t.Fatalf("client read during partition: %d bytes, %v; want a timeout (no RST, no FIN)", n, err)
	}
	p.Heal()
	if got, want := readN(t, c, len(complete("26"))), complete("26"); !bytes.Equal(got, want) {
		t.Errorf("after heal the held query was answered %x, want %x", got, want)
	}
	select {
	case <-accepted:
	case <-time.After(5 * time.Second):
		t.Error("the late connection did not reach the server after the heal")
	}
	if s := p.Stats(); s.Partitions != 1 || s.Conns != 2 {
		t.Errorf("stats %+v", s)
	}
}

// PartitionOnQuery fires when a statement is about to execute, not when it is prepared: inside a
// pipeline (Bind/Execute of BEGIN, a query and COMMIT in one write) what precedes the trapped
// statement reaches the server and the rest is held until the heal.
func TestPartitionOnQuery(t *testing.T) {
	t.Parallel()
	got := make(chan []byte, 100)
	addr := fakeServer(t, func(c net.Conn) {
		srvRead(c, len(startupMsg()))
		var all []byte
		for {
			b := make([]byte, 1024)
			n, err := c.Read(b)
			all = append(all, b[:n]...)
			got <- append([]byte(nil), all...)
			if err != nil {
				return
			}
		}
	})
	p := startProxy(t, addr)
	fired := p.PartitionOnQuery("COMMIT")
	c := dial(t, p)
	writeAll(t, c, startupMsg())
	prepare := concat(parse("s1", "  begin isolation level serializable"), parse("s2", "commit"), parse("", "SELECT 1"), syncMsg())
	pipeline := concat(bind("s1"), execute(), bind(""), execute(), bind("s2"), execute(), syncMsg())
	writeAll(t, c, prepare) // a Parse of "commit" only prepares it: no partition
	waitFor(t, got, prepare)
	if p.Partitioned() {
		t.Fatal("partitioned by a Parse")
	}
	writeAll(t, c, pipeline)
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("trap did not fire")
	}
	before := concat(prepare, bind("s1"), execute(), bind(""), execute())
	waitFor(t, got, before)
	select {
	case b := <-got:
		t.Fatalf("server got %x during the partition", b[len(before):])
	case <-time.After(200 * time.Millisecond):
	}
	p.Heal()
	waitFor(t, got, concat(prepare, pipeline))
}

// PartitionOnCommandTag holds the server's reply from the trapped CommandComplete on.
func TestPartitionOnCommandTag(t *testing.T) {
	t.Parallel()
	reply := concat(complete("BEGIN"), complete("UPDATE 1"), complete("COMMIT"), ready('I'))
	addr := fakeServer(t, func(c net.Conn) {
		srvRead(c, len(startupMsg()))
		srvWrite(c, reply)
		io.Copy(io.Discard, c)
	})
	p := startProxy(t, addr)
	fired := p.PartitionOnCommandTag("COMMIT")
	c := dial(t, p)
	writeAll(t, c, startupMsg())
	head := concat(complete("BEGIN"), complete("UPDATE 1"))
	if got := readN(t, c, len(head)); !bytes.Equal(got, head) {
		t.Fatalf("before the trap: %x", got)
	}
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("trap did not fire")
	}
	_ = c.SetReadDeadline(shortDeadline())
	if n, err := c.Read(make([]byte, 8)); n != 0 || !os.IsTimeout(err) {
		t.Fatalf("during the partition: %d bytes, %v; want nothing", n, err)
	}
	p.Heal()
	tail := concat(complete("COMMIT"), ready('I'))
	if got := readN(t, c, len(tail)); !bytes.Equal(got, tail) {
		t.Errorf("after the heal: %x, want %x", got, tail)
	}
}

func bind(statement string) []byte {
	return typedMsg('B', cstr(""), cstr(statement), []byte{0, 0, 0, 0, 0, 0})
}
func execute() []byte { return typedMsg('E', cstr(""), []byte{0, 0, 0, 0}) }
func syncMsg() []byte { return typedMsg('S') }

// waitFor waits until the server has received exactly want so far.
func waitFor(t *testing.T, got <-chan []byte, want []byte) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case b := <-got:
			if bytes.Equal(b, want) {
				return
			}
			if len(b) > len(want) {
				t.Fatalf("server got %x, more than %x", b, want)
			}
		case <-timeout:
			t.Fatalf("server never got %x", want)
		}
	}
}

// After an SSLRequest answered 'N' the stream is parsed as usual (the single byte is not taken
// for a message header); an 'S' answer switches the connection to unparsed pass-through.
func TestSSLNegotiation(t *testing.T) {
	t.Parallel()
	for _, answer := range []byte{'N', 'S'} {
		addr := fakeServer(t, func(c net.Conn) {
			srvRead(c, len(sslRequest()))
			srvWrite(c, []byte{answer})
			srvRead(c, len(startupMsg()))
			srvWrite(c, concat(authOK(), ready('I'), complete("COMMIT"), ready('I')))
			// and close: the client reads to the end
		})
		p := startProxy(t, addr)
		dropped := p.DropNextCommit()
		c := dial(t, p)
		srvWrite(c, sslRequest())
		if b := readN(t, c, 1); b[0] != answer {
			t.Fatalf("answer %q", b)
		}
		srvWrite(c, startupMsg())
		head := concat(authOK(), ready('I'))
		if got := readN(t, c, len(head)); !bytes.Equal(got, head) {
			t.Fatalf("%c: start-up reply %x", answer, got)
		}
		_ = c.SetReadDeadline(deadline())
		rest, _ := io.ReadAll(c)
		switch answer {
		case 'N':
			if len(rest) != 0 || p.Stats().CommitsDropped != 1 {
				t.Errorf("N: got %x after start-up and %d drops; want the COMMIT swallowed", rest, p.Stats().CommitsDropped)
			}
			<-dropped
		case 'S':
			if want := concat(complete("COMMIT"), ready('I')); !bytes.Equal(rest, want) {
				t.Errorf("S: got %x, want the stream passed through", rest)
			}
			if s := p.Stats(); s.Unparsed != 1 || s.CommitsDropped != 0 {
				t.Errorf("S: stats %+v, want 1 unparsed connection and no drop", s)
			}
		}
	}
}

// An error response and a malformed length do not stop the bytes: a malformed stream is passed
// through unparsed.
func TestMalformedStreamPassesThrough(t *testing.T) {
	t.Parallel()
	garbage := []byte{'X', 0xff, 0xff, 0xff, 0xff, 'a', 'b'}
	addr := fakeServer(t, func(c net.Conn) {
		srvRead(c, len(startupMsg()))
		srvWrite(c, concat(errorResp("28P01"), garbage))
		io.Copy(io.Discard, c)
	})
	p := startProxy(t, addr)
	c := dial(t, p)
	srvWrite(c, startupMsg())
	want := concat(errorResp("28P01"), garbage)
	if got := readN(t, c, len(want)); !bytes.Equal(got, want) {
		t.Errorf("got %x, want %x", got, want)
	}
	if s := p.Stats(); s.Unparsed != 1 {
		t.Errorf("stats %+v, want 1 unparsed", s)
	}
}

func TestCloseEndsEverything(t *testing.T) {
	t.Parallel()
	addr := fakeServer(t, func(c net.Conn) { io.Copy(io.Discard, c) })
	p := startProxy(t, addr)
	c := dial(t, p)
	srvWrite(c, startupMsg())
	p.Partition()
	held := dial(t, p) // waiting in the partition
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	for _, conn := range []net.Conn{c, held} {
		_ = conn.SetReadDeadline(deadline())
		if _, err := conn.Read(make([]byte, 1)); err == nil || os.IsTimeout(err) {
			t.Errorf("connection still open after Close: %v", err)
		}
	}
}

// DropResponseTo swallows the answer to one statement, up to the idle ReadyForQuery that ends
// its transaction, and resets the client; an earlier statement's answer passes.
func TestDropResponseTo(t *testing.T) {
	t.Parallel()
	other, begin, ack, commit := query("-- name: Other\nSELECT 1"), query("BEGIN"), query("  -- name: Ack :one\nWITH x AS (SELECT 1) SELECT 1"), query("COMMIT")
	addr := fakeServer(t, func(c net.Conn) {
		srvRead(c, len(startupMsg()))
		srvWrite(c, concat(authOK(), ready('I')))
		for _, step := range []struct{ q, reply []byte }{
			{other, concat(complete("SELECT 1"), ready('I'))},
			{begin, concat(complete("BEGIN"), ready('T'))},
			{ack, concat(complete("SELECT 1"), ready('T'))},
			{commit, concat(complete("COMMIT"), ready('I'))},
		} {
			if !srvRead(c, len(step.q)) {
				return
			}
			srvWrite(c, step.reply)
		}
	})
	p := startProxy(t, addr)
	dropped := p.DropResponseTo("-- name: Ack")
	c := dial(t, p)
	writeAll(t, c, startupMsg())
	readN(t, c, len(authOK())+len(ready('I')))
	writeAll(t, c, other)
	readN(t, c, len(complete("SELECT 1"))+len(ready('I')))
	writeAll(t, c, begin)
	readN(t, c, len(complete("BEGIN"))+len(ready('T')))
	writeAll(t, c, ack)
	// the statement's answer (in a transaction) is held back; the client goes on to COMMIT
	writeAll(t, c, commit)
	_ = c.SetReadDeadline(deadline())
	n, err := c.Read(make([]byte, 64))
	if n != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after the trapped statement: read %d bytes, err %v; want nothing and ECONNRESET", n, err)
	}
	select {
	case d := <-dropped:
		if !slices.Equal(d.Tags, []string{"SELECT 1", "BEGIN"}) || !slices.Equal(d.Swallowed, []string{"SELECT 1", "COMMIT"}) {
			t.Errorf("drop %+v; want tags SELECT 1, BEGIN before, SELECT 1, COMMIT swallowed", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no drop event")
	}
}
