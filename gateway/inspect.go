package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/policy"
)

// Inspector is the seam package inspect plugs into (NewInspector wraps an
// *inspect.Scanner). The inspect stage (after screen, before decide) scans
// what a request carries in the clear: its URL path and query, its headers,
// its body (streamed, see inspectBody), and, across requests of one sandbox,
// the pieces of a split secret (WindowAdd). Its findings are policy input
// (input.content.findings) and go on the audit record (Record.Findings).
type Inspector interface {
	Scan(where string, data []byte) []inspect.Finding
	ScanFields(fields []inspect.Field) []inspect.Finding
	NewStream(where string) StreamScanner
	WindowAdd(sandboxID string, fields []inspect.Field) []inspect.Finding
	ScanResponse(contentType string, data []byte) []inspect.Finding
}

// StreamScanner scans a body written to it piece by piece (*inspect.Stream).
type StreamScanner interface {
	Write(p []byte) (int, error)
	Findings() []inspect.Finding
	Close() error
}

var _ StreamScanner = (*inspect.Stream)(nil)

// NewInspector is the Inspector of a scanner.
func NewInspector(s *inspect.Scanner) Inspector { return scannerInspector{s} }

type scannerInspector struct{ *inspect.Scanner }

func (s scannerInspector) NewStream(where string) StreamScanner { return s.Scanner.NewStream(where) }

func (s scannerInspector) WindowAdd(sandboxID string, fields []inspect.Field) []inspect.Finding {
	return s.Scanner.Window(sandboxID).Add(fields)
}

// contentOf is rc's findings so far: those of the URL, headers and a body
// read before policy, then those of the streamed body.
func contentOf(rc *reqCtx) []inspect.Finding {
	fs := rc.findings
	if b := rc.body; b != nil {
		fs = append(fs[:len(fs):len(fs)], b.found()...)
	}
	if l := rc.late; l != nil {
		fs = append(fs[:len(fs):len(fs)], l.found()...)
	}
	return fs
}

// inspectStage is the inspect stage. It runs on HTTP requests (plain and
// intercepted, HTTP/1 and HTTP/2, gRPC included); DNS names are the DNS
// filter's. A JSON body with a declared length up to InspectMaxJSON is read
// here, before policy, so JSON-RPC and LLM calls are policy input and a
// secret split across JSON fields is found; any other body is scanned as it
// streams to the upstream (inspectBody).
func (g *Gateway) inspectStage(rc *reqCtx) error {
	sc := g.cfg.Inspector
	if sc == nil || rc.kind != policy.KindHTTP || rc.req == nil {
		return nil
	}
	req := rc.req
	query, headers := requestFields(req)
	fs := sc.ScanFields(headers)
	fs = append(fs, splitScan(sc, query)...)
	// The window sees what carries data (query values, the body's values),
	// not the headers every request repeats, so pieces sent in consecutive
	// requests are adjacent in it.
	fields := query
	if u := req.URL.Path; u != "" && u != "/" {
		fs = append(fs, sc.ScanFields(pathFields(u))...)
	}
	if b := req.Body; b != nil && b != http.NoBody {
		bfs, more, err := g.inspectJSON(rc, sc)
		if err != nil {
			return err
		}
		fs = append(fs, bfs...)
		fields = append(fields, jsonValues(more)...)
	}
	fs = append(fs, sc.WindowAdd(rc.cc.sb.info.ID, fields)...)
	rc.findings = dedupFindings(fs)
	if b := req.Body; b != nil && b != http.NoBody && rc.body == nil && !rc.bodyRead {
		where := "body"
		if isGRPC(req) {
			where = "grpc.message"
		}
		rc.body = &inspectBody{g: g, rc: rc, src: req.Body, st: sc.NewStream(where), max: g.cfg.InspectMaxBody}
		if where == "grpc.message" {
			rc.body.grpc = &grpcFrames{}
		}
		req.Body = rc.body
	}
	return nil
}

// requestFields are the pieces of a request's URL and headers a secret may
// be split across: each query value (where url.query) and each header value
// (where header:NAME).
func requestFields(req *http.Request) (query, headers []inspect.Field) {
	// One buffer holds every value (decoding only shortens a query value),
	// so a request costs a few allocations whatever its header count.
	size, nq, nh := len(req.URL.RawQuery), 0, 0
	if req.URL.RawQuery != "" {
		nq = strings.Count(req.URL.RawQuery, "&") + 1
	}
	for _, vs := range req.Header {
		nh += len(vs)
		for _, v := range vs {
			size += len(v)
		}
	}
	buf := make([]byte, 0, size)
	take := func(v string) []byte {
		lo := len(buf)
		buf = append(buf, v...)
		return buf[lo:len(buf):len(buf)]
	}
	fields := make([]inspect.Field, 0, nq+nh)
	for q := req.URL.RawQuery; q != ""; {
		var kv string
		kv, q, _ = strings.Cut(q, "&")
		k, v, _ := strings.Cut(kv, "=")
		if v == "" {
			v, k = k, ""
		}
		// Decoded as the origin reads it (the raw form is a decoding the
		// scanner undoes too, but a +-for-space breaks a PEM block).
		if strings.ContainsAny(v, "%+") {
			if d, err := url.QueryUnescape(v); err == nil {
				v = d
			}
		}
		fields = append(fields, inspect.Field{Where: "url.query", Name: k, Value: take(v)})
	}
	query = fields[:len(fields):len(fields)]
	// In name order, so the pieces of a secret split across headers
	// named in sequence are neighbours (ScanFields joins neighbours).
	var small [16]string
	names := small[:0]
	for k := range req.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		where := headerWhere(k)
		for _, v := range req.Header[k] {
			fields = append(fields, inspect.Field{Where: where, Name: k, Value: take(v)})
		}
	}
	return query, fields[len(query):]
}

// headerWhere is "header:" and the lowercase name, for the common headers
// without an allocation.
func headerWhere(k string) string {
	if w, ok := commonHeaderWhere[k]; ok {
		return w
	}
	return "header:" + lowerHeader(k)
}

var commonHeaderWhere = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Connection", "Content-Length", "Content-Type", "Cookie", "If-Modified-Since", "If-None-Match",
		"Origin", "Pragma", "Referer", "Te", "User-Agent", "X-Request-Id", "Traceparent"} {
		m[k] = "header:" + strings.ToLower(k)
	}
	return m
}()

// pathFields are a URL path's segments, each scanned on its own (an encoded
// value is one segment) and joined (a value split across segments).
func pathFields(p string) []inspect.Field {
	rest := strings.Trim(p, "/")
	if rest == "" {
		return nil
	}
	buf := []byte(rest)
	out := make([]inspect.Field, 0, min(maxPathSegments, strings.Count(rest, "/")+1))
	for len(buf) > 0 {
		seg := buf
		if len(out) < maxPathSegments-1 {
			if i := bytes.IndexByte(buf, '/'); i >= 0 {
				seg, buf = buf[:i:i], buf[i+1:]
			} else {
				buf = nil
			}
		} else {
			buf = nil // the rest of a long path is one last field
		}
		if len(seg) > 0 {
			out = append(out, inspect.Field{Where: "url.path", Value: seg})
		}
	}
	return out
}

// maxPathSegments bounds the fields a path is cut into.
const maxPathSegments = 64

// splitScan finds a secret split across the values of one message (query
// parameters, JSON string values): the values joined, and, since a joined
// run can hide a token's word boundary behind its neighbours, each pair of
// neighbours joined too.
func splitScan(sc Inspector, values []inspect.Field) []inspect.Finding {
	switch len(values) {
	case 0:
		return nil
	case 1, 2:
		return sc.ScanFields(values)
	}
	fs := sc.ScanFields(values)
	for i := 0; i+1 < len(values) && i < maxSplitPairs; i++ {
		for _, f := range sc.ScanFields(values[i : i+2]) {
			if f.Split {
				fs = append(fs, f)
			}
		}
	}
	return fs
}

// maxSplitPairs bounds the neighbour pairs splitScan scans in one message.
const maxSplitPairs = 64

// jsonValues are the value fields of inspect.JSONFields (its key fields are
// named "{}" or "PATH.{}").
func jsonValues(fields []inspect.Field) []inspect.Field {
	var out []inspect.Field
	for _, f := range fields {
		if f.Name != "{}" && !strings.HasSuffix(f.Name, ".{}") {
			out = append(out, f)
		}
	}
	return out
}

// isJSON reports whether a content type is JSON (application/json,
// application/*+json, application/json-rpc).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "application/json-rpc" ||
		(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}

// inspectPreread: a body of declared length up to this many bytes is read
// and scanned before policy, so a refused one never reaches the origin at
// all; a longer one streams (inspectBody).
const inspectPreread = 64 << 10

// inspectJSON reads a body of declared length up to inspectPreread (a JSON
// body: up to InspectMaxJSON) under BodyScanTimeout and scans it; a JSON one
// as fields (JSON string leaves: a secret
// split across tool arguments is found), parses JSON-RPC and LLM calls into
// rc.in, and puts the body back for relay. Malformed JSON is a finding.
func (g *Gateway) inspectJSON(rc *reqCtx, sc Inspector) ([]inspect.Finding, []inspect.Field, error) {
	req := rc.req
	n := req.ContentLength
	jsonBody := isJSON(req.Header.Get("Content-Type"))
	limit := int64(inspectPreread)
	if jsonBody {
		limit = g.cfg.InspectMaxJSON
	}
	// A client waiting for 100 Continue sends no body until the upstream
	// exchange begins (sendUpstream answers it): its body streams.
	if n <= 0 || n > limit || isGRPC(req) || hasToken(req.Header["Expect"], "100-continue") {
		return nil, nil, nil
	}
	body, err := g.readBodyBounded(rc, n)
	if err != nil {
		return nil, nil, err
	}
	rc.bodyRead = true
	if !jsonBody {
		// The body is one field of the sandbox's window, so a secret sent
		// in pieces over consecutive requests is found.
		return sc.Scan("body", body), []inspect.Field{{Where: "body", Value: body}}, nil
	}
	lim := inspect.Limits{MaxBytes: int(g.cfg.InspectMaxJSON)}
	var fs []inspect.Finding
	fields, perr := inspect.JSONFields("body", body, lim)
	if perr != nil {
		fs = append(fs, inspect.MalformedFinding("body", perr))
		fs = append(fs, sc.Scan("body", body)...) // scanned as text instead
	} else {
		if len(fields) == 0 {
			fs = append(fs, sc.Scan("body", body)...) // no string leaves: the text as it is
		} else {
			fs = append(fs, sc.ScanFields(fields)...)
			fs = append(fs, splitScan(sc, jsonValues(fields))...)
		}
		if rpc, err := inspect.ParseJSONRPC(body, lim); err == nil && rpc != nil {
			rc.jsonrpc = jsonrpcInput(rpc)
			for _, m := range rpc.Messages {
				fs = append(fs, sc.ScanFields(m.Fields())...) // tool arguments, message parts
			}
			for i := range fields {
				fields[i].Where = "jsonrpc.params"
			}
		}
		if llm, err := inspect.ParseLLM(rc.host, req.URL.Path, body, lim); err == nil && llm != nil {
			rc.llm = &policy.LLM{Provider: llm.Provider, Model: llm.Model, Stream: llm.Stream, Operation: llm.Operation}
		}
	}
	return fs, fields, nil
}

// readBodyBounded reads exactly n bytes of rc's body (its declared length)
// under BodyScanTimeout, and puts them back as the body.
func (g *Gateway) readBodyBounded(rc *reqCtx, n int64) ([]byte, error) {
	req := rc.req
	if st := rc.sess.h2; st != nil {
		st.rctl.SetReadDeadline(time.Now().Add(g.cfg.BodyScanTimeout))
		defer st.rctl.SetReadDeadline(time.Time{})
	} else {
		rc.sess.rd.bound(time.Now().Add(g.cfg.BodyScanTimeout))
		defer rc.sess.rd.unbound()
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(req.Body, buf); err != nil {
		if isTimeout(err) || (rc.sess.h2 == nil && rc.sess.rd.expired.Load()) {
			return nil, &denial{reason: ReasonBodyScanTimeout, status: http.StatusRequestTimeout,
				msg: fmt.Sprintf("request body not received within %v (body_scan_timeout)", g.cfg.BodyScanTimeout)}
		}
		return nil, deny(ReasonBadRequest, "reading request body: %v", err)
	}
	req.Body = newReplayBody(buf, req.Body)
	return buf, nil
}

// replayBody is a body read ahead and replayed, closing the original.
type replayBody struct {
	bytes.Reader
	io.Closer
}

// newReplayBody replays b and closes orig: one allocation.
func newReplayBody(b []byte, orig io.Closer) *replayBody {
	r := &replayBody{Closer: orig}
	r.Reset(b)
	return r
}

// jsonrpcInput is policy's view of a parsed JSON-RPC body.
func jsonrpcInput(rpc *inspect.JSONRPC) *policy.JSONRPC {
	if len(rpc.Messages) == 0 {
		return nil
	}
	m := rpc.Messages[0]
	out := &policy.JSONRPC{Method: m.Method, ID: m.ID, Tool: m.Tool, Arguments: m.Arguments, Batch: rpc.Batch}
	for _, p := range m.Parts {
		part := map[string]any{"kind": p.Kind}
		if p.Text != "" {
			part["text"] = p.Text
		}
		if p.MimeType != "" {
			part["mimeType"] = p.MimeType
		}
		if p.URI != "" {
			part["uri"] = p.URI
		}
		if p.Bytes != 0 {
			part["bytes"] = p.Bytes
		}
		out.Parts = append(out.Parts, part)
	}
	if rpc.Batch {
		for _, x := range rpc.Messages {
			out.Messages = append(out.Messages, policy.JSONRPCMessage{Method: x.Method, ID: x.ID, Tool: x.Tool})
		}
	}
	return out
}

// dedupFindings drops repeats (the same detector, place, encoding and
// fingerprint), keeping the first.
func dedupFindings(fs []inspect.Finding) []inspect.Finding {
	if len(fs) < 2 {
		return fs
	}
	type key struct{ d, w, e, f string }
	seen := make(map[key]bool, len(fs))
	out := fs[:0]
	for _, f := range fs {
		k := key{f.Detector, f.Where, f.Encoding, f.Fingerprint}
		if !seen[k] {
			seen[k] = true
			out = append(out, f)
		}
	}
	return out
}

// contentInput puts rc's findings and parsed protocols into in (rc's policy
// input, or a copy of it).
func contentInput(in *policy.Input, rc *reqCtx, partial bool) {
	in.JSONRPC, in.LLM = rc.jsonrpc, rc.llm
	fs := contentOf(rc)
	if len(fs) == 0 {
		in.Content = nil
		return
	}
	c := &policy.Content{Findings: make([]policy.Finding, len(fs)), Partial: partial}
	for i, f := range fs {
		c.Findings[i] = policy.Finding(f)
	}
	in.Content = c
}

// auditFindings is rc's findings as the audit record carries them.
func auditFindings(rc *reqCtx) []audit.Finding {
	fs := contentOf(rc)
	if len(fs) == 0 {
		return nil
	}
	out := make([]audit.Finding, len(fs))
	for i, f := range fs {
		out[i] = audit.Finding(f)
	}
	return out
}

// inspectBody scans a request body as it streams to the upstream, holding
// nothing back: each read is scanned (inspect.Stream, with an overlap so a
// token across two reads is found) before it is handed on, and policy is
// asked again whenever a read adds a finding, and once more at the body's
// end. A deny fails that read, so its bytes never leave: the upstream
// request is aborted with an incomplete body and its connection closed
// (sendUpstream turns the error into the denial); a token cut across two
// reads leaves at most its first part. Nothing is held, so a gRPC
// bidirectional stream flows message by message. Past InspectMaxBody bytes
// the rest is relayed unscanned and one oversize finding goes to policy.
type inspectBody struct {
	g   *Gateway
	rc  *reqCtx
	src io.ReadCloser
	st  StreamScanner
	max int64

	grpc      *grpcFrames // a gRPC call's body: messages scanned without their prefixes
	gbuf      []byte
	grpcFound []inspect.Finding // of the recent messages as fields (a split)
	scanned   int64
	decided   int // findings the last decision saw

	mu  sync.Mutex
	fs  []inspect.Finding
	dec *policy.Decision // the deny a finding in the body led to
	err error
}

func (b *inspectBody) found() []inspect.Finding {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fs
}

// lateDecision is the decision that denied the body mid-stream, if any.
func (b *inspectBody) lateDecision() *policy.Decision {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dec
}

func (b *inspectBody) Close() error { return b.src.Close() }

func (b *inspectBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.src.Read(p)
	if n > 0 {
		b.scan(p[:n])
		if derr := b.check(false); derr != nil {
			return 0, derr // these bytes never leave
		}
	}
	if err == io.EOF {
		b.st.Close()
		b.scan(nil)
		if derr := b.check(true); derr != nil {
			return 0, derr
		}
	} else if err != nil {
		b.err = err
	}
	return n, err
}

// scan runs the stream over chunk, up to the cap, and takes its findings.
func (b *inspectBody) scan(chunk []byte) {
	over := false
	if len(chunk) > 0 {
		room := b.max - b.scanned
		if int64(len(chunk)) > room {
			over = b.scanned <= b.max && room >= 0
			chunk = chunk[:max(room, 0)]
		}
		if len(chunk) > 0 {
			data := chunk
			if b.grpc != nil {
				data = b.grpc.payload(chunk, b.gbuf[:0])
				b.gbuf = data[:0]
			}
			b.st.Write(data)
			if b.grpc != nil && b.grpc.completed {
				b.grpc.completed = false
				b.grpcFound = append(b.grpcFound, b.g.cfg.Inspector.ScanFields(b.grpc.fields())...)
			}
		}
		b.scanned += int64(len(chunk))
		if over {
			b.scanned++ // past the cap: reported once
		}
	}
	fs := append(b.st.Findings(), b.grpcFound...)
	b.mu.Lock()
	defer b.mu.Unlock()
	if over {
		b.fs = append(b.fs, inspect.Finding{Detector: inspect.DetectorOversize, Class: inspect.ClassOversize,
			Where: "body", Confidence: inspect.High})
	}
	// Stream.Findings returns every finding so far; keep the new ones.
	for _, f := range fs {
		if !containsFinding(b.fs, f) {
			b.fs = append(b.fs, f)
		}
	}
}

func containsFinding(fs []inspect.Finding, f inspect.Finding) bool {
	for _, x := range fs {
		if x == f {
			return true
		}
	}
	return false
}

// check asks policy again when the body added findings since it was last
// asked (end: the body is complete). A deny ends the body.
func (b *inspectBody) check(end bool) error {
	b.mu.Lock()
	n := len(b.fs)
	b.mu.Unlock()
	if n == b.decided {
		return nil
	}
	b.decided = n
	rc := b.rc
	in := rc.in // a copy: on HTTP/2 this runs beside the stream's own goroutine
	contentInput(&in, rc, !end)
	ctx := newDecisionCtx(b.g.cfg.PolicyTimeout)
	d := b.g.dec.Decide(ctx, &in)
	ctx.stop()
	err := denialOf(d)
	if err == nil {
		return nil
	}
	var dn *denial
	if errors.As(err, &dn) {
		dn.msg = "in the request body, after part of it was sent: " + dn.msg
	}
	b.mu.Lock()
	b.dec = &d
	b.mu.Unlock()
	b.err = err
	return err
}

// lateDenial is the denial a streamed body's inspection ended the request
// with (err is what the body returned to the upstream writer), or nil. The
// decision that denied becomes the request's, for its record.
func (rc *reqCtx) lateDenial(err error) error {
	b := rc.body
	if b == nil {
		return nil
	}
	var d *denial
	if !errors.As(err, &d) {
		return nil
	}
	if dec := b.lateDecision(); dec != nil {
		rc.dec, rc.decided = *dec, true
	}
	return d
}

// redactedPath stands in the audit record for a path a finding was in.
const redactedPath = "[path withheld: content inspection found a credential or canary in it]"

// pathHasFinding reports whether a finding was in the URL path, which the
// record then does not quote.
func pathHasFinding(fs []audit.Finding) bool {
	for _, f := range fs {
		// What the path must not keep is the secret itself: a credential or
		// canary (in whatever encoding). A path flagged for hidden text or
		// entropy stays, as the auditor needs to see it (escaped on display).
		if f.Where == "url.path" && (f.Class == audit.FindingClassCredential || f.Class == audit.FindingClassCanary || f.Class == "encoded") {
			return true
		}
	}
	return false
}

// grpcFrames follows a gRPC body's length-prefixed messages (a flag byte and
// a 4-byte big-endian length) across reads and returns their payload bytes,
// so a secret split across two messages is contiguous for the scanner. It
// also keeps the last few small messages whole, to be scanned as the fields
// of one split (a protobuf field header sits between the halves).
type grpcFrames struct {
	hdr       []byte
	left      uint32
	cur       []byte   // the message being received, while small
	big       bool     // cur outgrew grpcFieldBytes
	recent    [][]byte // the last grpcFieldCount small messages
	completed bool     // a message completed since the flag was cleared
}

const (
	grpcFieldBytes = 4 << 10
	grpcFieldCount = 4
)

func (f *grpcFrames) payload(b, out []byte) []byte {
	for len(b) > 0 {
		if f.left == 0 {
			f.hdr = append(f.hdr, b[0])
			b = b[1:]
			if len(f.hdr) == 5 {
				f.left = uint32(f.hdr[1])<<24 | uint32(f.hdr[2])<<16 | uint32(f.hdr[3])<<8 | uint32(f.hdr[4])
				f.hdr = f.hdr[:0]
				f.cur, f.big = f.cur[:0], false
				if f.left == 0 {
					f.done()
				}
			}
			continue
		}
		n := min(uint32(len(b)), f.left)
		out = append(out, b[:n]...)
		if !f.big {
			if len(f.cur)+int(n) > grpcFieldBytes {
				f.big = true
			} else {
				f.cur = append(f.cur, b[:n]...)
			}
		}
		b = b[n:]
		f.left -= n
		if f.left == 0 {
			f.done()
		}
	}
	return out
}

// done ends the current message.
func (f *grpcFrames) done() {
	f.completed = true
	if f.big {
		f.recent = f.recent[:0] // a large message breaks a run of small ones
		return
	}
	if len(f.recent) == grpcFieldCount {
		f.recent = append(f.recent[:0], f.recent[1:]...)
	}
	f.recent = append(f.recent, append([]byte(nil), f.cur...))
}

// fields are the recent small messages, as fields.
func (f *grpcFrames) fields() []inspect.Field {
	out := make([]inspect.Field, len(f.recent))
	for i, m := range f.recent {
		out[i] = inspect.Field{Where: "grpc.message", Value: m}
	}
	return out
}

// forgetContent drops what inspection keeps of a stopped sandbox (its
// window of recent values), when the Inspector keeps any.
func (g *Gateway) forgetContent(id string) {
	if f, ok := g.cfg.Inspector.(interface{ Forget(string) }); ok {
		f.Forget(id)
	}
}
