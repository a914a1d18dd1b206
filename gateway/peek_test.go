package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

// clientHello captures the bytes a crypto/tls client sends first.
func clientHello(t testing.TB, sni string) []byte {
	t.Helper()
	a, b := net.Pipe()
	go func() {
		c := tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: sni == ""})
		c.SetDeadline(time.Now().Add(time.Second))
		c.Handshake()
		a.Close()
	}()
	buf := make([]byte, 16<<10)
	b.SetReadDeadline(time.Now().Add(2 * time.Second))
	n, _ := b.Read(buf)
	b.Close()
	return buf[:n]
}

func TestPeekClientHello(t *testing.T) {
	hello := clientHello(t, "PyPI.org")
	tests := []struct {
		name    string
		in      []byte
		want    string
		wantErr bool
	}{
		{"real hello", hello, "PyPI.org", false},
		{"no sni", clientHello(t, ""), "", false},
		{"not tls", []byte("GET / HTTP/1.1\r\n\r\n"), "", true},
		{"truncated", hello[:40], "", true},
		{"bad record version", append([]byte{0x16, 9}, hello[2:]...), "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReaderSize(bytes.NewReader(tc.in), maxPeekBytes)
			got, err := peekClientHello(br, maxPeekBytes)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("got %q, %v; want %q, err=%v", got, err, tc.want, tc.wantErr)
			}
			if br.Buffered() > 0 {
				if b, _ := br.Peek(1); b[0] != tc.in[0] {
					t.Fatal("peek consumed input")
				}
			}
		})
	}
	// A hello split into two records is reassembled.
	body := hello[5:]
	split := []byte{0x16, 3, 1, 0, 10}
	split = append(split, body[:10]...)
	split = append(split, 0x16, 3, 1, byte((len(body)-10)>>8), byte(len(body)-10))
	split = append(split, body[10:]...)
	got, err := peekClientHello(bufio.NewReaderSize(bytes.NewReader(split), maxPeekBytes), maxPeekBytes)
	if err != nil || got != "PyPI.org" {
		t.Fatalf("split hello: got %q %v", got, err)
	}
}

func TestPeekHTTPRequest(t *testing.T) {
	tests := []struct {
		name, in, wantHost string
		wantErr            bool
	}{
		{"origin form", "GET /x HTTP/1.1\r\nHost: pypi.org\r\nAccept: */*\r\n\r\n", "pypi.org", false},
		{"absolute", "POST http://a.example/ HTTP/1.1\r\nhost:  b.example:81 \r\n\r\nbody", "b.example:81", false},
		{"no host", "GET / HTTP/1.0\r\n\r\n", "", false},
		{"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "", true},
		{"binary", "\x00\x01\x02", "", true},
		{"http2", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "", true},
		{"space in name", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pr, err := peekHTTPRequest(bufio.NewReaderSize(strings.NewReader(tc.in), 4096), 4096)
			if (err != nil) != tc.wantErr || !tc.wantErr && pr.Host != tc.wantHost {
				t.Fatalf("got %+v, %v; want host %q err=%v", pr, err, tc.wantHost, tc.wantErr)
			}
		})
	}
}

func FuzzPeekClientHello(f *testing.F) {
	f.Add(clientHello(f, "pypi.org"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), maxPeekBytes)
		sni, err := peekClientHello(br, maxPeekBytes)
		if err == nil && len(sni) > len(b) {
			t.Fatalf("sni longer than input")
		}
		// Never consumes: the first byte is still there.
		if len(b) > 0 {
			if got, _ := br.Peek(1); len(got) == 1 && got[0] != b[0] {
				t.Fatal("input consumed")
			}
		}
	})
}

func FuzzPeekHTTPRequest(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n"))
	f.Add([]byte("CONNECT a:443 HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(b), 4096)
		pr, err := peekHTTPRequest(br, 4096)
		if err == nil && (pr.Method == "" || pr.Target == "") {
			t.Fatalf("accepted without method/target: %+v", pr)
		}
		if len(b) > 0 {
			if got, _ := br.Peek(1); len(got) == 1 && got[0] != b[0] {
				t.Fatal("input consumed")
			}
		}
	})
}

// TestMethodStringNoAllocation: a standard method's string costs no
// allocation; any other is copied out of the buffer it was read into.
func TestMethodStringNoAllocation(t *testing.T) {
	for _, m := range rfcMethods {
		b := []byte(m)
		if got := methodString(b); got != m {
			t.Fatalf("methodString(%q) = %q", m, got)
		}
		if n := testing.AllocsPerRun(100, func() { _ = methodString(b) }); n != 0 {
			t.Errorf("methodString(%q): %v allocations", m, n)
		}
	}
	b := []byte("PROPFIND")
	got := methodString(b)
	b[0] = 'X'
	if got != "PROPFIND" {
		t.Fatalf("an unknown method aliases its buffer: %q", got)
	}
}
