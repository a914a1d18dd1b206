package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/inspect/inspecttest"
)

// TestInspectCorpusThroughGateway runs the detectors engineer's corpus
// (inspect/inspecttest) through a real gateway with the real scanner and the
// real policy engine under a team policy that allows every destination, with
// a fake origin as witness: every HTTP transport of the corpus (query, path,
// headers, bodies, JSON, MCP, A2A, gRPC, consecutive requests, websocket
// frames, responses). A block case must be refused and its secret must not
// reach the origin whole; a detect case must be recorded; a benign case must
// pass with no finding above low. DNS cases run through the DNS filter
// (dnsfilter's TestScanNameCorpus). It prints the block rate on attacks and
// the false-positive rate on benign cases.
func TestInspectCorpusThroughGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole corpus through the gateway")
	}
	canaries := inspect.NewCanaries(realKey).For("sb-test")
	cases := inspecttest.Cases(canaries)
	hosts := map[string]bool{}
	for _, c := range cases {
		if c.Transport != inspecttest.DNS {
			hosts[c.Host] = true
		}
	}
	var hl []string
	for h := range hosts {
		hl = append(hl, h)
	}
	eng := allowAllEngine(t, nil)
	origin := &corpusOrigin{}
	up := newUpstream(t, origin, nil)
	ws := newRawWSUpstream(t)
	h := newHarness(t, eng, names(hl...), nil, withInspector(realInspector(t), 0))
	h.allowUpstreams(up, ws.upstream)
	client := h.proxyClient(nil)

	type tally struct{ attacks, blocked, detectOK, detects, benign, fp int }
	var n tally
	var failed []string
	for i, c := range cases {
		if c.Transport == inspecttest.DNS {
			continue
		}
		origin.reset(c)
		var res corpusResult
		switch c.Transport {
		case inspecttest.WS:
			res = corpusWS(t, h, ws, c, i)
		default:
			res = corpusHTTP(t, h, client, up.port, c)
		}
		recs := h.log.Match(func(r audit.Record) bool { return res.ids[r.ID] })
		found := map[string]bool{}
		high := false
		for _, r := range recs {
			for _, f := range r.Findings {
				found[f.Class] = true
				if f.Confidence != inspect.Low {
					high = true
				}
			}
		}
		leaked := origin.leaked(c)
		switch c.Expect {
		case inspecttest.ExpectBlock:
			n.attacks++
			if res.blocked && !leaked {
				n.blocked++
			} else {
				failed = append(failed, fmt.Sprintf("block %s [%s]: blocked %v, origin got it whole %v", c.Name, c.Transport, res.blocked, leaked))
			}
		case inspecttest.ExpectDetect:
			n.detects++
			if found[c.Class] {
				n.detectOK++
			} else {
				failed = append(failed, fmt.Sprintf("detect %s [%s]: no %s finding (%v)", c.Name, c.Transport, c.Class, found))
			}
		default:
			n.benign++
			if res.blocked || high {
				n.fp++
				failed = append(failed, fmt.Sprintf("benign %s [%s]: blocked %v, findings %v", c.Name, c.Transport, res.blocked, found))
			}
		}
	}
	for _, f := range failed {
		t.Log(f)
	}
	t.Logf("corpus through the gateway: blocked %d/%d block attacks (%.1f%%), detected %d/%d detect cases, false positives %d/%d benign (%.1f%%)",
		n.blocked, n.attacks, pct(n.blocked, n.attacks), n.detectOK, n.detects, n.fp, n.benign, pct(n.fp, n.benign))
	if pct(n.blocked, n.attacks) < 95 || n.fp > 0 {
		t.Errorf("goal: at least 95%% of block attacks blocked and no false positive")
	}
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// corpusResult is what one case led to: whether the gateway refused it (any
// of its requests, or its websocket), and the ids of its records.
type corpusResult struct {
	blocked bool
	ids     map[string]bool
}

// corpusHTTP sends a case's request (or, for consecutive requests, each
// piece as a POST body in turn) through the explicit proxy.
func corpusHTTP(t *testing.T, h *harness, c *http.Client, port int, k inspecttest.Case) corpusResult {
	res := corpusResult{ids: map[string]bool{}}
	bodies := [][]byte{k.Body}
	method := k.Method
	switch k.Transport {
	case inspecttest.Requests:
		bodies, method = k.Pieces, http.MethodPost
	case inspecttest.GRPC:
		bodies = [][]byte{bytes.Join(k.Pieces, nil)}
	}
	if method == "" {
		method = http.MethodGet
		if len(k.Body) > 0 {
			method = http.MethodPost
		}
	}
	path := k.Path
	if path == "" {
		path = "/"
	}
	for _, b := range bodies {
		var body io.Reader
		if len(b) > 0 {
			body = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, fmt.Sprintf("http://%s:%d%s", k.Host, port, path), body)
		if err != nil {
			t.Fatalf("%s: %v", k.Name, err)
		}
		for _, hv := range k.Headers {
			req.Header.Add(hv[0], hv[1])
		}
		if k.Transport == inspecttest.GRPC {
			req.Header.Set("Content-Type", "application/grpc")
		}
		before := len(h.log.Records())
		resp, err := c.Do(req)
		if err != nil {
			res.blocked = true // the gateway cut the request off
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusForbidden && strings.HasPrefix(resp.Header.Get("X-Airlock-Reason"), "content_") {
				res.blocked = true
			}
		}
		for _, r := range waitRecords(h, before) {
			res.ids[r.ID] = true
			if r.Decision == audit.DecisionDeny && len(r.Reasons) > 0 && strings.HasPrefix(r.Reasons[0].ID, "content_") {
				res.blocked = true
			}
		}
	}
	return res
}

// waitRecords waits (bounded) for the records written after before.
func waitRecords(h *harness, before int) []audit.Record {
	deadline := time.Now().Add(2 * time.Second)
	for {
		rs := h.log.Records()
		if len(rs) > before || time.Now().After(deadline) {
			return rs[before:]
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// corpusWS sends a case's pieces as the frames of one websocket message
// through the transparent listener.
func corpusWS(t *testing.T, h *harness, up *rawWSUpstream, k inspecttest.Case, i int) corpusResult {
	res := corpusResult{ids: map[string]bool{}}
	h.origDst.Store(netip.MustParseAddrPort(up.addr))
	path := fmt.Sprintf("/ws-corpus-%d", i)
	conn, _ := wsUpgrade(t, h.transp, path, fmt.Sprintf("%s:%d", k.Host, up.port), "")
	defer conn.Close()
	for j, p := range k.Pieces {
		op := byte(1)
		if j > 0 {
			op = 0
		}
		conn.Write(wsFrameBytes(j == len(k.Pieces)-1, op, p))
	}
	time.Sleep(50 * time.Millisecond)
	conn.Close()
	r := h.log.Wait(t, k.Name, func(r audit.Record) bool { return r.Path == path })
	res.ids[r.ID] = true
	res.blocked = r.Decision == audit.DecisionDeny
	return res
}

// wsFrameBytes is wsFrame for any payload length.
func wsFrameBytes(fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	var hdr []byte
	switch n := len(payload); {
	case n < 126:
		hdr = []byte{b0, 0x80 | byte(n)}
	case n < 1<<16:
		hdr = []byte{b0, 0x80 | 126, byte(n >> 8), byte(n)}
	default:
		hdr = []byte{b0, 0x80 | 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
	}
	hdr = append(hdr, 0, 0, 0, 0) // a zero mask: the payload reads as sent
	return append(hdr, payload...)
}

// corpusOrigin answers every request with the current case's response and
// keeps what it received.
type corpusOrigin struct {
	mu       sync.Mutex
	c        inspecttest.Case
	recv     bytes.Buffer
	inflight atomic.Int32 // handlers running: a refused case's may still be reading its cut body
}

// reset starts case c once the previous case's handlers are done, so what
// one of them reads late is not counted as c's.
func (o *corpusOrigin) reset(c inspecttest.Case) {
	for deadline := time.Now().Add(10 * time.Second); o.inflight.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	o.mu.Lock()
	o.c = c
	o.recv.Reset()
	o.mu.Unlock()
}

func (o *corpusOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.inflight.Add(1)
	defer o.inflight.Add(-1)
	b, _ := io.ReadAll(r.Body)
	o.mu.Lock()
	c := o.c
	o.recv.WriteString(r.URL.RequestURI() + "\n")
	for k, vs := range r.Header {
		o.recv.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
	}
	o.recv.Write(b)
	o.mu.Unlock()
	if c.Transport == inspecttest.Response {
		w.Header().Set("Content-Type", c.ContentType)
		w.Write(c.Response)
		return
	}
	w.Write([]byte("ok"))
}

// leaked reports whether the origin received the case's request whole: its
// body, or, for a body-less case, its path and headers.
func (o *corpusOrigin) leaked(c inspecttest.Case) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	got := o.recv.Bytes()
	switch {
	case c.Transport == inspecttest.Requests:
		last := c.Pieces[len(c.Pieces)-1]
		return len(last) > 0 && bytes.Contains(got, last)
	case c.Transport == inspecttest.GRPC:
		return len(got) > 0 && bytes.Contains(got, bytes.Join(c.Pieces, nil))
	case len(c.Body) > 0:
		return bytes.Contains(got, c.Body)
	}
	return len(got) > 0
}
