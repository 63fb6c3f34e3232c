package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// receiveCommand serves the endpoint make bench attaches to paygate: it
// answers every POST 200 at once, having read the body, so that what is
// measured is paygate's delivery, not the receiver's work. GET /count
// answers how many POSTs it took; GET /healthz answers 200.
//
// It is also the OTLP/HTTP trace receiver paygate's tracing exports to
// (OTEL_EXPORTER_OTLP_ENDPOINT=http://<addr>): POST /v1/traces, an
// ExportTraceServiceRequest in protobuf or JSON, gzipped or not, is
// answered 200 with an empty ExportTraceServiceResponse as the OTLP
// specification says, its spans counted (not a delivery); GET /spans
// answers how many it took.
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

// receiver counts the POSTs it answered, and the spans exported to it.
type receiver struct {
	posts atomic.Int64
	spans atomic.Int64
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
	// An exporter sends at most 512 spans a request by default
	// (OTEL_BSP_MAX_EXPORT_BATCH_SIZE), well under this.
	maxTraceBody = 64 << 20
)

var (
	answerOK       = []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	answerNotFound = []byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
	// A body without a Content-Length (chunked) is not read: paygate
	// always sends one.
	answerNoLength  = []byte("HTTP/1.1 411 Length Required\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	answerMalformed = []byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	// An empty ExportTraceServiceResponse: no bytes in protobuf, {} in
	// JSON.
	answerTracesProto = []byte("HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n")
	answerTracesJSON  = []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	answerUnsupported = []byte("HTTP/1.1 415 Unsupported Media Type\r\nContent-Length: 0\r\n\r\n")
	answerTooLarge    = []byte("HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
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
		case h.method == "POST" && h.target == "/v1/traces":
			answer, ok := rc.traces(r, h)
			if answer != nil {
				_, err = c.Write(answer)
			}
			if err != nil || !ok || h.close {
				return
			}
			continue
		case h.length < 0:
			_, _ = c.Write(answerNoLength)
			return
		}
		if _, err := r.Discard(int(h.length)); err != nil {
			return
		}
		answer := answerNotFound
		switch {
		case h.method == "GET" && h.target == "/spans":
			answer = countAnswer(rc.spans.Load())
		case h.method == "POST":
			rc.posts.Add(1)
			answer = answerOK
		case h.method == "GET" && h.target == "/healthz":
			answer = answerOK
		case h.method == "GET" && h.target == "/count":
			answer = countAnswer(rc.posts.Load())
		}
		if _, err := c.Write(answer); err != nil || h.close {
			return
		}
	}
}

func countAnswer(n int64) []byte {
	body := strconv.FormatInt(n, 10) + "\n"
	return fmt.Appendf(nil, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// traces reads an OTLP export's body and counts its spans; ok is false
// when the connection cannot go on (the body was not read whole).
func (rc *receiver) traces(r *bufio.Reader, h head) (answer []byte, ok bool) {
	body, answer := traceBody(r, h)
	if body == nil {
		return answer, false
	}
	if h.gzip {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return answerMalformed, false
		}
		if body, err = io.ReadAll(io.LimitReader(zr, maxTraceBody)); err != nil {
			return answerMalformed, false
		}
	}
	var (
		n   int
		err error
	)
	switch h.contentType {
	case "application/x-protobuf":
		n, err = protoSpans(body)
		answer = answerTracesProto
	case "application/json":
		n, err = jsonSpans(body)
		answer = answerTracesJSON
	default:
		return answerUnsupported, true
	}
	if err != nil {
		return answerMalformed, false
	}
	rc.spans.Add(int64(n))
	return answer, true
}

// traceBody reads an export's body, of a Content-Length or chunked (the
// SDK's exporter chunks what it gzips); nil, with the answer if any, when
// it cannot.
func traceBody(r *bufio.Reader, h head) ([]byte, []byte) {
	if h.length > maxTraceBody {
		return nil, answerTooLarge
	}
	if h.length >= 0 {
		body := make([]byte, h.length)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, nil
		}
		return body, nil
	}
	body, err := io.ReadAll(io.LimitReader(httputil.NewChunkedReader(r), maxTraceBody+1))
	switch {
	case err != nil:
		return nil, answerMalformed
	case len(body) > maxTraceBody:
		return nil, answerTooLarge
	}
	// The trailer section, which an empty line ends.
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, nil
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			return body, nil
		}
	}
}

// The fields that hold the spans: ExportTraceServiceRequest.resource_spans,
// ResourceSpans.scope_spans, ScopeSpans.spans.
var spansPath = []protowire.Number{
	fieldNumber(&coltracepb.ExportTraceServiceRequest{}, "resource_spans"),
	fieldNumber(&tracepb.ResourceSpans{}, "scope_spans"),
	fieldNumber(&tracepb.ScopeSpans{}, "spans"),
}

func fieldNumber(m proto.Message, name protoreflect.Name) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(name).Number()
}

// protoSpans counts the spans of a protobuf ExportTraceServiceRequest by
// walking its wire format down spansPath: decoding every span and its
// attributes would cost the receiver, which shares the cores with the
// paygate it measures, several times more.
func protoSpans(b []byte) (int, error) { return countPath(b, spansPath) }

func countPath(b []byte, path []protowire.Number) (int, error) {
	n := 0
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		if num == path[0] && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return 0, protowire.ParseError(l)
			}
			b = b[l:]
			if len(path) == 1 {
				n++
				continue
			}
			k, err := countPath(v, path[1:])
			if err != nil {
				return 0, err
			}
			n += k
			continue
		}
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
	}
	return n, nil
}

// jsonSpans counts the spans of an ExportTraceServiceRequest in OTLP/JSON
// (lowerCamelCase keys).
func jsonSpans(b []byte) (int, error) {
	var req struct {
		ResourceSpans []struct {
			ScopeSpans []struct {
				Spans []json.RawMessage `json:"spans"`
			} `json:"scopeSpans"`
		} `json:"resourceSpans"`
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return 0, err
	}
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	return n, nil
}

// head is what the receiver needs of a request's head.
type head struct {
	method, target string
	length         int64 // -1: a body without a Content-Length
	close          bool
	contentType    string // its media type, without parameters
	gzip           bool   // Content-Encoding: gzip
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
		case bytes.EqualFold(name, []byte("Content-Type")):
			mediaType, _, _ := bytes.Cut(value, []byte(";"))
			h.contentType = strings.ToLower(string(bytes.TrimSpace(mediaType)))
		case bytes.EqualFold(name, []byte("Content-Encoding")):
			h.gzip = bytes.EqualFold(value, []byte("gzip"))
		}
	}
	return head{}, errMalformed
}
