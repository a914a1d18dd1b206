package gateway

import (
	"bytes"
	"fmt"
	"go/build"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/inspect/inspecttest"
)

var testEncodings = []string{"gzip", "deflate", "br", "zstd"}

// encodeParts is parts compressed with enc, the encoder flushed after each
// part (as a streaming server flushes), and where each flush ended.
func encodeParts(t testing.TB, enc string, parts ...string) ([]byte, []int) {
	t.Helper()
	var b bytes.Buffer
	w, err := respEncodings[enc].encode(&b)
	if err != nil {
		t.Fatal(err)
	}
	var ends []int
	for _, p := range parts {
		io.WriteString(w, p)
		w.Flush()
		ends = append(ends, b.Len())
	}
	w.Close()
	ends[len(ends)-1] = b.Len()
	return b.Bytes(), ends
}

// decodeLenient is what a client's decoder makes of a prefix of a stream:
// every byte it yields before it runs out or fails.
func decodeLenient(enc string, raw []byte) []byte {
	r, err := decoderOf(enc)(bytes.NewReader(raw))
	if err != nil {
		return nil
	}
	var out bytes.Buffer
	buf := make([]byte, 512)
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			return out.Bytes()
		}
	}
}

// TestRespDecoderStep: the streaming decoder hands back the whole text of
// every encoding, however the raw bytes are cut, and never calls safe a raw
// prefix that a client's decoder makes more text of than was handed back:
// what the relay hands on was always scanned first.
func TestRespDecoderStep(t *testing.T) {
	var text strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&text, "line %d of a long document, words words words %x\n", i, i*7919)
	}
	parts := []string{text.String()[:50000], text.String()[50000:51000], text.String()[51000:]}
	for _, enc := range testEncodings {
		for _, step := range []int{1, 7, 512, 4096, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%d", enc, step), func(t *testing.T) {
				raw, _ := encodeParts(t, enc, parts...)
				d := newRespDecoder(enc)
				defer d.stop()
				var got []byte
				for i := 0; i < len(raw); i += step {
					d.push(raw[i:min(len(raw), i+step)], func(p []byte) bool { got = append(got, p...); return true })
					if d.safe > d.fed {
						t.Fatalf("safe %d past fed %d", d.safe, d.fed)
					}
					if step >= 512 || i%97 == 0 { // the client's view of the safe prefix
						if seen := decodeLenient(enc, raw[:d.safe]); len(seen) > len(got) {
							t.Fatalf("at %d: a client decodes %d bytes of the %d safe raw bytes, only %d were handed back", i, len(seen), d.safe, len(got))
						}
					}
				}
				d.push(nil, func(p []byte) bool { got = append(got, p...); return true })
				if d.err != io.EOF || string(got) != text.String() || d.safe != int64(len(raw)) {
					t.Fatalf("got %d bytes (err %v, safe %d of %d), want the whole text", len(got), d.err, d.safe, len(raw))
				}
			})
		}
	}
}

// TestRespDecoderStops: a decoder stopped part way (a bound, a block)
// returns, and a corrupt stream ends with an error, not a hang.
func TestRespDecoderStops(t *testing.T) {
	for _, enc := range testEncodings {
		raw, _ := encodeParts(t, enc, strings.Repeat("stop me ", 1<<16))
		d := newRespDecoder(enc)
		for i := 0; i < len(raw) && !d.finished; i += 16 {
			d.push(raw[i:min(len(raw), i+16)], func([]byte) bool { return false })
		}
		if !d.finished || d.err != errDecodeStopped {
			t.Errorf("%s: got finished %v err %v, want stopped", enc, d.finished, d.err)
		}
		d.push(raw, nil) // no-op once stopped
		bad := newRespDecoder(enc)
		bad.push([]byte("this is not "+enc+" at all, not even close, \x00\x01\x02\x03 nope"), func([]byte) bool { return true })
		bad.push(nil, func([]byte) bool { return true })
		if !bad.finished || bad.err == nil || bad.err == io.EOF {
			t.Errorf("%s corrupt: got finished %v err %v, want a decoding error", enc, bad.finished, bad.err)
		}
	}
}

// streamBodies are the encoded bodies of the stream cases, shared by the
// upstreams and the tests' expectations, each made once (brotli is slow
// under -race) and, through body, before the request that fetches it: a
// response waits on the network and the gateway, never on its own encoding.
type streamBodies struct {
	t     testing.TB
	cache sync.Map // enc/name: *streamBody
}

// streamBody is one case's raw bytes and where each upstream write ends.
type streamBody struct {
	once sync.Once
	raw  []byte
	ends []int
}

func (s *streamBodies) body(enc, name string) *streamBody {
	v, _ := s.cache.LoadOrStore(enc+"/"+name, &streamBody{})
	b := v.(*streamBody)
	b.once.Do(func() {
		b.raw, b.ends = encodeParts(s.t, enc, streamParts(name)...)
		if name == "empty-blocks" {
			// One write per empty block would be 260001 writes of a few
			// bytes (as many HTTP/2 frames: seconds under -race); the
			// gateway reads the same raw bytes in writes of 16 KiB, each
			// far short of respHoldMax, the stream far past it.
			var ends []int
			for e := 16 << 10; e < len(b.raw); e += 16 << 10 {
				ends = append(ends, e)
			}
			b.ends = append(ends, len(b.raw))
		}
	})
	return b
}

// streamHandler serves compressed responses the way streaming servers do:
// unsized (chunked on HTTP/1.1), flushed after each part. Paths are
// /ENC/NAME[/CLIENT]; the parts are streamParts(NAME).
func streamHandler(bodies *streamBodies) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, rest, _ := strings.Cut(r.URL.Path, "/")
		enc, name, _ := strings.Cut(rest, "/")
		name, _, _ = strings.Cut(name, "/") // a client's suffix
		b := bodies.body(enc, name)
		raw, ends := b.raw, b.ends
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if strings.HasPrefix(name, "sse") {
			w.Header().Set("Content-Type", "text/event-stream")
		}
		w.Header().Set("Content-Encoding", enc)
		if name == "corrupt" {
			raw, ends = []byte(strings.Repeat("not compressed at all; ", 100)), []int{2300}
		}
		if strings.HasPrefix(name, "sized") {
			w.Header().Set("Content-Length", strconv.Itoa(len(raw)))
		}
		last := 0
		for _, e := range ends {
			w.Write(raw[last:e])
			w.(http.Flusher).Flush()
			last = e
		}
	})
}

// streamParts are the texts of the compressed stream cases.
func streamParts(name string) []string {
	var lb strings.Builder // 1.2 MB of log lines (past respDecideMax), as compressible as real ones
	for i := 0; lb.Len() < 1200<<10; i++ {
		fmt.Fprintf(&lb, "2026-11-29T09:%02d:%02d.%06dZ INFO request id=%08x path=/v1/items/%d took %dms\n", i/3600%60, i/60%60, i*7919%1000000, i*2654435761, i%977, i*31%503)
	}
	long := lb.String()
	switch name {
	case "benign", "sized-benign":
		return []string{long[:600<<10], long[600<<10:]}
	case "late", "sized-late":
		// The injection after a long benign part the relay has handed on.
		return []string{long, injVisible + "\n", "AFTER-MARK\n" + long[:10<<10]}
	case "early", "sized-early":
		// Short and chunked: nothing has left when the injection is read.
		return []string{"Install with pip.\n", "<!-- " + injVisible + " -->\n", "Done. AFTER-MARK\n"}
	case "sse":
		return []string{evBefore, evInjected, evAfter}
	case "empty-blocks":
		// Raw bytes that decode to nothing (an empty block per flush), past
		// respHoldMax: held back for no text, then cut.
		return append(make([]string, 260000), "AFTER-MARK")
	case "bomb":
		return []string{strings.Repeat("\x00", 4<<20)}
	}
	return []string{"hello"}
}

// streamHarness is a gateway with the response policy in front of a plain
// HTTP/1.1 and an HTTP/2 TLS upstream serving the stream cases, and a
// client of each. The clients have no deadline: a stream case takes what
// the gateway needs to read it past its bounds (seconds under -race on a
// loaded machine), and a client that gave up would cut the stream itself,
// its record then saying client_closed rather than what the gateway
// decided (the empty blocks case under -race ran 9-10 s of the 10 s the
// harness clients allow). A hang is go test's -timeout.
func streamHarness(t *testing.T) (*harness, []respClient, *streamBodies) {
	t.Helper()
	eng := allowAllEngine(t, map[string]string{"resp.rego": respPolicy})
	pki := newTestPKI(t)
	cert := pki.leaf(t, "block.example", "strip.example", "flag.example")
	bodies := &streamBodies{t: t}
	plain := newUpstream(t, streamHandler(bodies), nil)
	tls2 := newUpstreamProto(t, streamHandler(bodies), &cert, true)
	h := newHarness(t, eng, names("block.example", "strip.example", "flag.example"), pki, withInspector(realInspector(t), 0))
	h.allowUpstreams(plain, tls2)
	h1c, h2c := h.proxyClient(nil), h.h2Client()
	h1c.Timeout, h2c.Timeout = 0, 0
	return h, []respClient{
		{"http1 plain", h1c, func(host string) string { return fmt.Sprintf("http://%s:%d", host, plain.port) }},
		{"http2 intercepted", h2c, func(host string) string { return fmt.Sprintf("https://%s:%d", host, tls2.port) }},
	}, bodies
}

// fetchRaw GETs url asking for enc and returns the response and the raw
// (still compressed) bytes the client received, with the read error (a
// response cut before its first byte: status 0).
func fetchRaw(t *testing.T, c *http.Client, url, enc string) (*http.Response, []byte, error) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept-Encoding", enc) // set by hand: the client does not decode
	resp, err := c.Do(req)
	if err != nil { // a stream cut before its first byte
		return &http.Response{StatusCode: 0, Header: http.Header{}}, nil, err
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(resp.Body)
	return resp, b, rerr
}

// Compressed responses read as they stream: gzip, deflate, br and
// zstd bodies, unsized and flushed part by part, longer than the whole-body
// limit, are decoded as they arrive. What the client reads is checked:
//   - benign: the origin's compressed bytes, byte for byte, no finding;
//   - an injection late in a long stream, blocked: the stream is cut, and
//     what the client received decodes to none of the injection or after;
//   - the same, stripped: the benign part has left as it came, so a rewrite
//     cannot join it: cut too (content_strip_fixed_length);
//   - an injection early in a short chunked stream, stripped: nothing had
//     left, so the gateway re-encodes (same Content-Encoding) the text
//     without it; the client decodes it whole;
//   - an SSE stream, compressed, blocked at the injected event: cut before
//     it; stripped: re-encoded without it when no event had left yet, else
//     cut there;
//   - a decompression bomb (4 MiB of zeros): an oversize finding with the
//     ratio bound as its score, the bytes relayed (flagged by default);
//   - a body that is not what its Content-Encoding says: a malformed
//     finding;
//   - raw bytes that decode to nothing (empty deflate blocks) past
//     respHoldMax: cut (content_response_undecodable), never held without
//     bound.
func TestInspectResponseCompressedStream(t *testing.T) {
	h, clients, bodies := streamHarness(t)
	for ci, c := range clients {
		for _, enc := range testEncodings {
			name := c.name + "/" + enc
			fetch := func(t *testing.T, host, path string) (*http.Response, []byte, error) {
				bodies.body(enc, path) // encoded before the request
				return fetchRaw(t, c.client, fmt.Sprintf("%s/%s/%s/%d", c.base(host), enc, path, ci), enc)
			}
			record := func(t *testing.T, host, path string) audit.Record {
				return h.log.Wait(t, name+path, func(r audit.Record) bool {
					return r.Host == host && r.Path == fmt.Sprintf("/%s/%s/%d", enc, path, ci)
				})
			}
			t.Run(name+"/benign", func(t *testing.T) {
				want := bodies.body(enc, "benign").raw
				resp, got, rerr := fetch(t, "block.example", "benign")
				if resp.StatusCode != 200 || rerr != nil || !bytes.Equal(got, want) || resp.Header.Get("Content-Encoding") != enc {
					t.Fatalf("got %d %v %s, %d bytes (equal %v); want the origin's %d bytes", resp.StatusCode, rerr, resp.Header.Get("Content-Encoding"), len(got), bytes.Equal(got, want), len(want))
				}
				if r := record(t, "block.example", "benign"); r.Decision != audit.DecisionAllow || len(r.Findings) != 0 {
					t.Errorf("record: got %s %+v, want an allow with no finding", r.Decision, r.Findings)
				}
			})
			for _, host := range []string{"block.example", "strip.example"} {
				t.Run(name+"/late/"+host, func(t *testing.T) {
					resp, got, rerr := fetch(t, host, "late")
					text := decodeLenient(enc, got)
					if resp.StatusCode != 200 || rerr == nil {
						t.Fatalf("got %d, read error %v; want 200 cut short", resp.StatusCode, rerr)
					}
					if bytes.Contains(text, []byte("previous instructions")) || bytes.Contains(text, []byte("AFTER-MARK")) || len(text) == 0 {
						t.Fatalf("the client decoded %d bytes, with the injection or what followed it", len(text))
					}
					r := record(t, host, "late")
					want := "response_injection"
					if host == "strip.example" {
						want = ReasonStripFixedLength
					}
					if r.Decision != audit.DecisionDeny || !hasReason(r, want) {
						t.Errorf("record: got %s %v, want a deny %s", r.Decision, r.Reasons, want)
					}
				})
			}
			t.Run(name+"/early/stripped", func(t *testing.T) {
				resp, got, rerr := fetch(t, "strip.example", "early")
				if resp.StatusCode != 200 || rerr != nil || resp.Header.Get("Content-Encoding") != enc {
					t.Fatalf("got %d %v %q, want 200 %s", resp.StatusCode, rerr, resp.Header.Get("Content-Encoding"), enc)
				}
				r, err := decoderOf(enc)(bytes.NewReader(got))
				if err != nil {
					t.Fatal(err)
				}
				text, err := io.ReadAll(r)
				if err != nil || bytes.Contains(text, []byte("previous instructions")) || !bytes.Contains(text, []byte("Install with pip.")) || !bytes.Contains(text, []byte("AFTER-MARK")) {
					t.Fatalf("decoded %q (%v), want the page whole without the instruction", text, err)
				}
				if rec := record(t, "strip.example", "early"); rec.Decision != audit.DecisionAllow || rec.Extra[extraStripped] == nil {
					t.Errorf("record: got %s, stripped %s; want an allow that lists what was stripped", rec.Decision, rec.Extra[extraStripped])
				}
			})
			t.Run(name+"/sse/blocked", func(t *testing.T) {
				_, got, _ := fetch(t, "block.example", "sse")
				text := decodeLenient(enc, got)
				if bytes.Contains(text, []byte("previous instructions")) || bytes.Contains(text, []byte("AFTER-MARK")) {
					t.Fatalf("the client decoded %q", text)
				}
			})
			t.Run(name+"/sse/stripped", func(t *testing.T) {
				// When the first event left as it came before the injected
				// one was read, the stream cannot be rewritten: the strip
				// cuts it there. When both came in one read, nothing had
				// left: the stream is re-encoded without the injection.
				_, got, _ := fetch(t, "strip.example", "sse")
				text := decodeLenient(enc, got)
				if bytes.Contains(text, []byte("previous instructions")) || !bytes.Contains(text, []byte("first benign chunk")) {
					t.Fatalf("got %q, want the first event and not the injection", text)
				}
				r := record(t, "strip.example", "sse")
				if bytes.Contains(text, []byte("AFTER-MARK")) {
					if r.Decision != audit.DecisionAllow || r.Extra[extraStripped] == nil {
						t.Errorf("re-encoded: record got %s %v, stripped %s; want an allow listing what was stripped; text %q", r.Decision, r.Reasons, r.Extra[extraStripped], text)
					}
				} else if !hasReason(r, ReasonStripFixedLength) {
					t.Errorf("cut: record got %s %v, want a deny %s", r.Decision, r.Reasons, ReasonStripFixedLength)
				}
			})
			t.Run(name+"/bomb", func(t *testing.T) {
				want := bodies.body(enc, "bomb").raw
				resp, got, rerr := fetch(t, "flag.example", "bomb")
				if resp.StatusCode != 200 || rerr != nil || !bytes.Equal(got, want) {
					t.Fatalf("got %d %v, %d bytes; want the origin's %d bytes (flagged, not blocked)", resp.StatusCode, rerr, len(got), len(want))
				}
				r := record(t, "flag.example", "bomb")
				if !hasFinding(r, inspect.ClassOversize, respBombRatio) {
					t.Errorf("record findings: got %+v, want an oversize finding scored %d", r.Findings, respBombRatio)
				}
			})
			if enc == "gzip" || enc == "deflate" {
				t.Run(name+"/empty blocks", func(t *testing.T) {
					resp, got, rerr := fetch(t, "flag.example", "empty-blocks")
					// Cut before its first byte (status 0: the header goes with
					// it on HTTP/2) or after.
					if resp.StatusCode != 200 && resp.StatusCode != 0 || rerr == nil || bytes.Contains(decodeLenient(enc, got), []byte("AFTER-MARK")) || len(got) > respHoldMax {
						t.Fatalf("got %d %v, %d bytes; want the response cut short before its end", resp.StatusCode, rerr, len(got))
					}
					if r := record(t, "flag.example", "empty-blocks"); !hasReason(r, ReasonResponseUndecodable) {
						t.Errorf("record: got %s %v, want a deny %s", r.Decision, r.Reasons, ReasonResponseUndecodable)
					}
				})
			}
			t.Run(name+"/corrupt", func(t *testing.T) {
				fetch(t, "flag.example", "corrupt")
				r := record(t, "flag.example", "corrupt")
				if !hasFinding(r, inspect.ClassMalformed, 0) {
					t.Errorf("record findings: got %+v, want a malformed finding", r.Findings)
				}
			})
		}
	}
}

// TestInspectResponseCompressedWhole: br and zstd bodies of declared length
// are read whole as gzip ones are: injected instructions blocked (nothing of
// the body) or stripped (sent decoded, Content-Encoding dropped, length
// fixed), a benign one passed compressed byte for byte.
func TestInspectResponseCompressedWhole(t *testing.T) {
	_, clients, bodies := streamHarness(t)
	c := clients[1]
	for _, enc := range []string{"br", "zstd", "deflate"} {
		t.Run(enc+"/blocked", func(t *testing.T) {
			resp, got, _ := fetchRaw(t, c.client, c.base("block.example")+"/"+enc+"/sized-early", enc)
			if resp.StatusCode != http.StatusForbidden || bytes.Contains(decodeLenient(enc, got), []byte("previous")) {
				t.Fatalf("got %d, want 403 and none of the body", resp.StatusCode)
			}
		})
		t.Run(enc+"/stripped", func(t *testing.T) {
			resp, got, rerr := fetchRaw(t, c.client, c.base("strip.example")+"/"+enc+"/sized-early", enc)
			if resp.StatusCode != 200 || rerr != nil || resp.Header.Get("Content-Encoding") != "" || resp.ContentLength != int64(len(got)) {
				t.Fatalf("got %d %v %q len %d/%d, want 200 identity", resp.StatusCode, rerr, resp.Header.Get("Content-Encoding"), resp.ContentLength, len(got))
			}
			if bytes.Contains(got, []byte("previous instructions")) || !bytes.Contains(got, []byte("AFTER-MARK")) {
				t.Fatalf("got %q, want the page without the instruction", got)
			}
		})
		t.Run(enc+"/benign", func(t *testing.T) {
			want := bodies.body(enc, "sized-benign").raw
			resp, got, rerr := fetchRaw(t, c.client, c.base("block.example")+"/"+enc+"/sized-benign", enc)
			if resp.StatusCode != 200 || rerr != nil || !bytes.Equal(got, want) {
				t.Fatalf("got %d %v %d bytes, want the origin's %d", resp.StatusCode, rerr, len(got), len(want))
			}
		})
	}
}

func hasReason(r audit.Record, id string) bool {
	for _, x := range r.Reasons {
		if x.ID == id {
			return true
		}
	}
	return false
}

func hasFinding(r audit.Record, class string, score float64) bool {
	for _, f := range r.Findings {
		if f.Class == class && (score == 0 || f.Score == score) {
			return true
		}
	}
	return false
}

// gatewayDocs are real documents available offline (READMEs and Markdown
// of the Go tree, the npm metadata of inspecttest), at most max, each under
// 256 KiB, with the benign responses of the corpus.
func gatewayDocs(t *testing.T, max int) [][]byte {
	t.Helper()
	var docs [][]byte
	for _, c := range inspecttest.Cases(inspect.NewCanaries(realKey).For("sb-test")) {
		if c.Transport == inspecttest.Response && !c.Attack() {
			docs = append(docs, c.Response)
		}
	}
	for _, root := range []string{"../inspect/inspecttest/testdata", build.Default.GOROOT} {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || len(docs) >= max {
				return filepath.SkipDir
			}
			n := strings.ToLower(d.Name())
			if d.IsDir() || !(strings.HasPrefix(n, "readme") || strings.HasSuffix(n, ".md") || strings.HasSuffix(n, ".json")) {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && len(b) > 0 && len(b) < 256<<10 {
				docs = append(docs, b)
			}
			return nil
		})
	}
	return docs
}

// TestInspectResponseStreamRates measures what the new response paths do
// to real traffic under a policy that blocks injected instructions: real
// documents and the corpus's benign responses, each served compressed and
// chunked (the encodings in turn) and as a websocket server message, must
// all arrive (false-positive rate printed, want 0); the corpus's response
// attacks served the same ways must be refused (detection rate printed).
func TestInspectResponseStreamRates(t *testing.T) {
	docs := gatewayDocs(t, 400)
	var attacks [][]byte
	for _, c := range inspecttest.Cases(inspect.NewCanaries(realKey).For("sb-test")) {
		if c.Transport == inspecttest.Response && c.Attack() && c.ContentType != "text/event-stream" {
			attacks = append(attacks, c.Response)
		}
	}
	bodies := append(append([][]byte(nil), docs...), attacks...)
	eng := allowAllEngine(t, map[string]string{"resp.rego": respPolicy})
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var i int
		var enc string
		fmt.Sscanf(r.URL.Path, "/doc/%d/%s", &i, &enc)
		if enc == "ws" {
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
			brw.Write(serverFrame(true, false, 1, string(bodies[i])))
			brw.Write(serverFrame(true, false, 8, "\x03\xe8"))
			brw.Flush()
			return
		}
		raw, ends := encodeParts(t, enc, string(bodies[i][:len(bodies[i])/2]), string(bodies[i][len(bodies[i])/2:]))
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Encoding", enc)
		last := 0
		for _, e := range ends {
			w.Write(raw[last:e])
			w.(http.Flusher).Flush()
			last = e
		}
	}), nil)
	h := newHarness(t, eng, names("block.example"), nil, withInspector(realInspector(t), 0))
	h.allowUpstreams(up)
	c := h.proxyClient(nil)
	// refused reports whether body i, served as enc ("ws": a websocket
	// message), was refused: the client did not get it whole.
	refused := func(i int, enc string) bool {
		url := fmt.Sprintf("http://block.example:%d/doc/%d/%s", up.port, i, enc)
		if enc != "ws" {
			resp, got, rerr := fetchRaw(t, c, url, enc)
			return resp.StatusCode != 200 || rerr != nil || !bytes.Equal(decodeLenient(enc, got), bodies[i])
		}
		conn, br := wsUpgrade(t, h.explicit, url, fmt.Sprintf("block.example:%d", up.port), "")
		defer conn.Close()
		got, _ := io.ReadAll(br)
		fs := readFrames(t, got)
		return len(fs) == 0 || fs[0].op != 1 || fs[0].payload != string(bodies[i])
	}
	fp, det := 0, 0
	for i := range bodies {
		enc := testEncodings[i%len(testEncodings)]
		for _, how := range []string{enc, "ws"} {
			r := refused(i, how)
			switch {
			case i < len(docs) && r:
				fp++
				t.Errorf("benign document %d (%s, %d bytes) refused", i, how, len(bodies[i]))
			case i >= len(docs) && r:
				det++
			case i >= len(docs):
				t.Logf("attack %d (%s) passed: %.80q", i-len(docs), how, bodies[i])
			}
		}
	}
	nb, na := 2*len(docs), 2*len(attacks)
	t.Logf("compressed streams and websocket server messages: %d/%d benign refused (%.1f%%), %d/%d response attacks refused (%.0f%%)",
		fp, nb, pct(fp, nb), det, na, pct(det, na))
}

// TestDecodeBodyBounds: a body of declared length is decoded whole unless
// it passes respBombRatio times its size (past respBombMin: a bomb, cut
// there) or respScanMax; one that does not decode is not ok.
func TestDecodeBodyBounds(t *testing.T) {
	var text strings.Builder
	for i := 0; text.Len() < 3<<20; i++ {
		fmt.Fprintf(&text, "line %d %x of an ordinary document\n", i, i*2654435761)
	}
	for _, enc := range testEncodings {
		bomb, _ := encodeParts(t, enc, strings.Repeat("\x00", 4<<20))
		plain, _ := encodeParts(t, enc, text.String())
		for _, tc := range []struct {
			name              string
			raw               []byte
			whole, ok, isBomb bool
		}{
			{"bomb", bomb, false, true, true},
			{"ordinary text", plain, true, true, false},
			{"not compressed", []byte("plain text, not " + enc), false, false, false},
		} {
			out, whole, ok, isBomb := decodeBody(enc, tc.raw)
			if whole != tc.whole || ok != tc.ok || isBomb != tc.isBomb || tc.isBomb && len(out) > respBombMin {
				t.Errorf("%s/%s: got whole %v ok %v bomb %v (%d bytes), want %v %v %v", enc, tc.name, whole, ok, isBomb, len(out), tc.whole, tc.ok, tc.isBomb)
			}
		}
	}
}
