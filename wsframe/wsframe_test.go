package wsframe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// frame builds one client frame (masked with key when masked).
func frame(fin, rsv1 bool, op byte, masked bool, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	if rsv1 {
		b0 |= 0x40
	}
	var h []byte
	m := byte(0)
	if masked {
		m = 0x80
	}
	switch n := len(payload); {
	case n < 126:
		h = []byte{b0, m | byte(n)}
	case n < 1<<16:
		h = []byte{b0, m | 126, byte(n >> 8), byte(n)}
	default:
		h = []byte{b0, m | 127}
		h = binary.BigEndian.AppendUint64(h, uint64(n))
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	out := bytes.Clone(payload)
	if masked {
		h = append(h, key[:]...)
		for i := range out {
			out[i] ^= key[i&3]
		}
	}
	return append(h, out...)
}

type event struct {
	op      byte
	fin     bool
	payload string
}

// read feeds stream in pieces of size step and returns the frames seen with
// their payloads joined.
func read(t *testing.T, stream []byte, step int) ([]event, error) {
	t.Helper()
	var r Reader
	var evs []event
	for len(stream) > 0 {
		n := min(step, len(stream))
		err := r.Feed(stream[:n], func(h *Header) error {
			if h.RSV1 {
				return errors.New("compressed")
			}
			evs = append(evs, event{op: h.Opcode, fin: h.Fin})
			return nil
		}, func(h *Header, b []byte) {
			evs[len(evs)-1].payload += string(b)
		})
		if err != nil {
			return evs, err
		}
		stream = stream[n:]
	}
	return evs, nil
}

func TestReader(t *testing.T) {
	mid := bytes.Repeat([]byte("m"), 300)
	big := bytes.Repeat([]byte("b"), 70000)
	tests := []struct {
		name   string
		stream []byte
		want   []event
		err    bool
	}{
		{name: "one masked text frame", stream: frame(true, false, 1, true, []byte("hello")), want: []event{{1, true, "hello"}}},
		{name: "unmasked", stream: frame(true, false, 2, false, []byte("raw")), want: []event{{2, true, "raw"}}},
		{name: "continuation with a ping between", stream: bytes.Join([][]byte{
			frame(false, false, 1, true, []byte("AKIA")), frame(true, false, 9, true, []byte("p")), frame(true, false, 0, true, []byte("IOSF")),
		}, nil), want: []event{{1, false, "AKIA"}, {9, true, "p"}, {0, true, "IOSF"}}},
		{name: "16-bit length", stream: frame(true, false, 1, true, mid), want: []event{{1, true, string(mid)}}},
		{name: "64-bit length", stream: frame(true, false, 2, true, big), want: []event{{2, true, string(big)}}},
		{name: "empty frame then data", stream: append(frame(true, false, 1, true, nil), frame(true, false, 1, true, []byte("x"))...), want: []event{{1, true, ""}, {1, true, "x"}}},
		{name: "compressed frame stops the feed", stream: frame(true, true, 1, true, []byte("zz")), err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, step := range []int{1, 2, 3, 7, 64, len(tt.stream)} {
				got, err := read(t, tt.stream, step)
				if (err != nil) != tt.err {
					t.Fatalf("step %d: err %v, want error %v", step, err, tt.err)
				}
				if tt.err {
					continue
				}
				if len(got) != len(tt.want) {
					t.Fatalf("step %d: got %d frames, want %d", step, len(got), len(tt.want))
				}
				for i := range got {
					if got[i].op != tt.want[i].op || got[i].fin != tt.want[i].fin || got[i].payload != tt.want[i].payload {
						t.Fatalf("step %d frame %d: got op %d fin %v %d bytes, want op %d fin %v %d bytes", step, i, got[i].op, got[i].fin, len(got[i].payload), tt.want[i].op, tt.want[i].fin, len(tt.want[i].payload))
					}
				}
			}
		})
	}
}

// FuzzReader: any byte stream, fed in any split, never panics and yields the
// same payload bytes however it is split.
func FuzzReader(f *testing.F) {
	f.Add(frame(true, false, 1, true, []byte("hello")), 3)
	f.Add([]byte{0x81, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}, 1)
	f.Fuzz(func(t *testing.T, stream []byte, step int) {
		if step <= 0 || step > len(stream)+1 {
			step = 1
		}
		var a, b []byte
		var r1, r2 Reader
		r1.Feed(stream, nil, func(_ *Header, p []byte) { a = append(a, p...) })
		for s := stream; len(s) > 0; {
			n := min(step, len(s))
			r2.Feed(s[:n], nil, func(_ *Header, p []byte) { b = append(b, p...) })
			s = s[n:]
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("payload differs by split: %d vs %d bytes", len(a), len(b))
		}
	})
}
