package netns

import (
	"encoding/binary"
	"strings"
	"testing"
)

// entries builds a table blob of entries of the given sizes, each with its
// counters and comefrom set.
func entries(sizes ...int) []byte {
	var b []byte
	for _, n := range sizes {
		e := make([]byte, n)
		if n >= entrySize {
			binary.LittleEndian.PutUint16(e[entryNextOffset:], uint16(n))
			binary.LittleEndian.PutUint32(e[entryComefrom:], 0x8000_0002)
			binary.LittleEndian.PutUint64(e[entryCounters:], 7)
			binary.LittleEndian.PutUint64(e[entryCounters+8:], 700)
		}
		b = append(b, e...)
	}
	return b
}

func TestZeroBookkeeping(t *testing.T) {
	tests := []struct {
		name    string
		blob    []byte
		n       uint32
		wantErr string
	}{
		{"two entries", entries(entrySize, entrySize+40), 2, ""},
		{"fewer entries than counted", entries(entrySize), 2, "runs past"},
		{"more bytes than entries", entries(entrySize, entrySize), 1, "do not fill"},
		{"entry size below the header", append(entries(entrySize), entries(entrySize)[:entrySize]...), 2, ""},
		{"entry size past the table", entries(entrySize), 1, ""},
	}
	// Break the last two cases' sizes.
	binary.LittleEndian.PutUint16(tests[3].blob[entrySize+entryNextOffset:], 8)
	tests[3].wantErr = "bad size"
	binary.LittleEndian.PutUint16(tests[4].blob[entryNextOffset:], entrySize+8)
	tests[4].wantErr = "bad size"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := zeroBookkeeping(tt.blob, tt.n)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off < len(tt.blob); off += int(binary.LittleEndian.Uint16(tt.blob[off+entryNextOffset:])) {
				for i, c := range tt.blob[off+entryComefrom : off+entryCounters+countersSize] {
					if c != 0 {
						t.Fatalf("entry at %d: byte %d of comefrom and counters is %#x, want 0", off, i, c)
					}
				}
			}
		})
	}
}

func TestTableDiffers(t *testing.T) {
	base := xtTable{name: "filter", validHooks: 0x0e, numEntries: 2, entries: entries(entrySize, entrySize)}
	base.hookEntry[1] = entrySize
	tests := []struct {
		name string
		edit func(*xtTable)
		want string
	}{
		{"same", func(*xtTable) {}, ""},
		{"hooks", func(x *xtTable) { x.validHooks = 0x1b }, "hooks"},
		{"entry count", func(x *xtTable) { x.numEntries = 3 }, "entries, want"},
		{"chain offsets", func(x *xtTable) { x.underflow[3] = 8 }, "offsets"},
		{"a rule's bytes", func(x *xtTable) { x.entries = entries(entrySize, entrySize); x.entries[3] = 1 }, "entries differ"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := base
			tt.edit(&got)
			d := got.differs(base)
			if (tt.want == "") != (d == "") || !strings.Contains(d, tt.want) {
				t.Fatalf("got %q, want %q", d, tt.want)
			}
		})
	}
}
