package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
)

// receiveCommand serves the endpoint make bench attaches to paygate: it
// answers every POST 200 at once, having read the body, so that what is
// measured is paygate's delivery, not the receiver's work. GET /count
// answers how many POSTs it took; GET /healthz answers 200.
//
// It speaks HTTP/1.1 on the connection itself, keeping it alive between
// requests, rather than through net/http's server: the receiver shares
// the machine's two cores with paygate and PostgreSQL, and net/http's
// server took 47 µs of CPU a delivery there, more than paygate's own
// sending of it, a cost of the stand-in, not of paygate. make bench prints
// the receiver's CPU for each run it is in.
func receiveCommand(args []string) error {
	fs := flag.NewFlagSet("receive", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:9000", "listen address")
	_ = fs.Parse(args)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	return (&receiver{}).serve(ln)
}

// receiver counts the POSTs it answered.
type receiver struct {
	posts atomic.Int64
}

// serve answers each connection of ln until ln is closed.
func (rc *receiver) serve(ln net.Listener) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go rc.conn(c)
	}
}

// Bounds on a request's head: paygate's is a few hundred bytes.
const (
	maxHeadLine  = 8 << 10
	maxHeadLines = 100
)

var (
	answerOK       = []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	answerNotFound = []byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
	// A body without a Content-Length (chunked) is not read: paygate
	// always sends one.
	answerNoLength  = []byte("HTTP/1.1 411 Length Required\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	answerMalformed = []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
)

// conn answers the requests of one connection, one after the other.
func (rc *receiver) conn(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, maxHeadLine)
	for {
		h, err := readHead(r)
		switch {
		case errors.Is(err, errMalformed):
			_, _ = c.Write(answerMalformed)
			return
		case err != nil:
			return // closed by the client
		case h.length < 0:
			_, _ = c.Write(answerNoLength)
			return
		}
		if _, err := r.Discard(int(h.length)); err != nil {
			return
		}
		answer := answerNotFound
		switch {
		case h.method == "POST":
			rc.posts.Add(1)
			answer = answerOK
		case h.method == "GET" && h.target == "/healthz":
			answer = answerOK
		case h.method == "GET" && h.target == "/count":
			body := strconv.FormatInt(rc.posts.Load(), 10) + "\n"
			answer = fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		}
		if _, err := c.Write(answer); err != nil || h.close {
			return
		}
	}
}

// head is what the receiver needs of a request's head.
type head struct {
	method, target string
	length         int64 // -1: a body without a Content-Length
	close          bool
}

var errMalformed = errors.New("malformed request head")

// readHead reads a request line and its header fields (RFC 9112).
func readHead(r *bufio.Reader) (head, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return head{}, err
	}
	method, rest, ok1 := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(" "))
	target, version, ok2 := bytes.Cut(rest, []byte(" "))
	if !ok1 || !ok2 || !bytes.HasPrefix(version, []byte("HTTP/1.")) {
		return head{}, errMalformed
	}
	h := head{method: string(method), target: string(target), close: string(version) == "HTTP/1.0"}
	chunked := false
	for range maxHeadLines {
		line, err := r.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return head{}, errMalformed
			}
			return head{}, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if chunked {
				h.length = -1
			}
			return h, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return head{}, errMalformed
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return head{}, errMalformed
			}
			h.length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			h.close = bytes.EqualFold(value, []byte("close"))
		}
	}
	return head{}, errMalformed
}
