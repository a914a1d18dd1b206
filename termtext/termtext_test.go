package termtext

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain ascii", "GET /simple/requests/", "GET /simple/requests/"},
		{"empty", "", ""},
		{"printable unicode", "bücher.example ✓ 日本", "bücher.example ✓ 日本"},
		{"erase line and move up (CSI)", "/\x1b[2K\x1b[1A200 OK", `/\x1b[2K\x1b[1A200 OK`},
		{"carriage return", "a\rb", `a\rb`},
		{"newline", "a\nb", `a\nb`},
		{"tab", "a\tb", `a\tb`},
		{"nul and bell", "\x00\a", `\x00\x07`},
		{"del", "a\x7fb", `a\x7fb`},
		{"C1 CSI as a rune", "a\u009b2Kb", `a\u009b2Kb`},
		{"C1 NEL as a rune", "a\u0085b", `a\u0085b`},
		{"C1 CSI as a raw byte", "a\x9b2Kb", `a\x9b2Kb`},
		{"C1 OSC as a raw byte", "a\x9d0;title\x9c", `a\x9d0;title\x9c`},
		{"invalid utf-8", "a\xff\xc3b", `a\xff\xc3b`},
		{"truncated rune at the end", "a\xe2\x80", `a\xe2\x80`},
		{"right-to-left override", "evil\u202egnp.exe", `evil\u202egnp.exe`},
		{"every bidi embedding and override", "\u202a\u202b\u202c\u202d\u202e", `\u202a\u202b\u202c\u202d\u202e`},
		{"bidi isolates", "\u2066\u2067\u2068\u2069", `\u2066\u2067\u2068\u2069`},
		{"bidi marks", "\u200e\u200f\u061c", `\u200e\u200f\u061c`},
		{"zero width", "a\u200bb\u200cc\u200dd", `a\u200bb\u200cc\u200dd`},
		{"byte order mark", "\ufeffa", `\ufeffa`},
		{"line and paragraph separators", "a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"soft hyphen", "pay\u00adpal", `pay\u00adpal`},
		{"no-break space", "a\u00a0b", `a\u00a0b`},
		{"tag characters above the BMP", "a\U000e0041\U000e007f", `a\U000e0041\U000e007f`},
		{"backslash", `C:\path`, `C:\\path`},
		{"a forged escape stays distinguishable", `\x1b[2K`, `\\x1b[2K`},
		{"OSC 52 clipboard write", "\x1b]52;c;Y3VybCBldmls\a", `\x1b]52;c;Y3VybCBldmls\x07`},
		{"OSC 8 hyperlink", "\x1b]8;;https://evil.example\x1b\\pypi.org\x1b]8;;\x1b\\", `\x1b]8;;https://evil.example\x1b\\pypi.org\x1b]8;;\x1b\\`},
		{"replacement character is printable", "a\ufffdb", "a\ufffdb"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Escape(tc.in)
			if got != tc.want {
				t.Errorf("Escape(%q): got %q, want %q", tc.in, got, tc.want)
			}
			if back, err := unescape(got); err != nil || back != tc.in {
				t.Errorf("unescape(%q): got %q, %v, want %q", got, back, err, tc.in)
			}
		})
	}
}

// TestEscapeNoCopy: text with nothing to escape is the same string.
func TestEscapeNoCopy(t *testing.T) {
	s := strings.Repeat("pypi.org/simple/ ", 8)
	if n := testing.AllocsPerRun(100, func() { _ = Escape(s) }); n != 0 {
		t.Errorf("got %v allocations, want 0", n)
	}
}

func TestEscapeJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain line", `{"host":"pypi.org","path":"/a\\b\"c"}`, `{"host":"pypi.org","path":"/a\\b\"c"}`},
		{"json escapes kept", `{"path":"/\u001b[2K\n"}`, `{"path":"/\u001b[2K\n"}`},
		{"raw controls", "{\"path\":\"/\x1b[2K\r\x7f\"}", `{"path":"/\u001b[2K\u000d\u007f"}`},
		{"bidi and C1 runes", "{\"host\":\"a\u202eb\u009bc\u2066\"}", `{"host":"a\u202eb\u009bc\u2066"}`},
		{"above the BMP", "{\"p\":\"\U000e0041\"}", `{"p":"\udb40\udc41"}`},
		{"invalid utf-8", "{\"p\":\"a\x9bb\xff\"}", `{"p":"a\ufffdb\ufffd"}`},
		{"printable unicode", `{"p":"日本 ✓"}`, `{"p":"日本 ✓"}`},
		{"indented", "{\n\t\"p\": \"a\tb\"\r\n}", "{\n\t\"p\": \"a\\u0009b\" \n}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := string(EscapeJSON([]byte(tc.in)))
			if got != tc.want {
				t.Errorf("EscapeJSON(%q): got %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// unescape undoes Escape, refusing anything Escape cannot have written: if
// it inverts every output, no two inputs share one.
func unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r != '\\' && !Safe(r) {
			return "", fmt.Errorf("offset %d: %q is not printed as itself", i, s[i:i+size])
		}
		if r != '\\' {
			b.WriteString(s[i : i+size])
			i += size
			continue
		}
		if i+1 >= len(s) {
			return "", fmt.Errorf("offset %d: lone backslash", i)
		}
		digits := map[byte]int{'x': 2, 'u': 4, 'U': 8}[s[i+1]]
		switch c := s[i+1]; {
		case c == '\\':
			b.WriteByte('\\')
		case c == 't':
			b.WriteByte('\t')
		case c == 'n':
			b.WriteByte('\n')
		case c == 'r':
			b.WriteByte('\r')
		case digits > 0:
			if i+2+digits > len(s) {
				return "", fmt.Errorf("offset %d: short escape", i)
			}
			v, err := strconv.ParseUint(s[i+2:i+2+digits], 16, 32)
			if err != nil {
				return "", err
			}
			r := rune(v)
			switch {
			case c == 'x' && (v < 0x20 && v != '\t' && v != '\n' && v != '\r' || v == 0x7f):
				b.WriteByte(byte(v))
			case c == 'x' && v >= 0x80:
				b.WriteByte(byte(v)) // a byte of invalid UTF-8
			case c == 'u' && v >= 0x80 && !Safe(r) && utf8.ValidRune(r),
				c == 'U' && v > 0xffff && !Safe(r) && utf8.ValidRune(r):
				b.WriteRune(r)
			default:
				return "", fmt.Errorf("offset %d: Escape never writes %q", i, s[i:i+2+digits])
			}
			i += digits
		default:
			return "", fmt.Errorf("offset %d: unknown escape %q", i, s[i:i+2])
		}
		i += 2
	}
	return b.String(), nil
}

// FuzzEscape: the output is valid UTF-8 of printable runes and backslashes
// only, and unescape gives back the input (so the escaping is unambiguous).
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"pypi.org", "/\x1b[2K\x1b[1A", "a\u202eb", "\x9b\xff", `\x1b`, "\U000e0041", "a\\\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Escape(s)
		if !utf8.ValidString(out) {
			t.Fatalf("Escape(%q) = %q is not valid UTF-8", s, out)
		}
		for _, r := range out {
			if r != '\\' && !Safe(r) {
				t.Fatalf("Escape(%q) = %q holds %U", s, out, r)
			}
		}
		back, err := unescape(out)
		if err != nil || back != s {
			t.Fatalf("unescape(Escape(%q) = %q): got %q, %v", s, out, back, err)
		}
	})
}

// FuzzEscapeJSON: the output holds no rune Escape would escape but the
// backslash and the newline and tab between values, and JSON decodes to what
// it did before.
func FuzzEscapeJSON(f *testing.F) {
	for _, s := range []string{`"pypi.org"`, "\"/\x1b[2K\"", "\"a\u202eb\"", "\"\x9b\xff\"", `"\u001b\\"`, "\"\U000e0041\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := EscapeJSON([]byte(s))
		if !utf8.Valid(out) {
			t.Fatalf("EscapeJSON(%q) = %q is not valid UTF-8", s, out)
		}
		for _, r := range string(out) {
			if r != '\\' && r != '\n' && r != '\t' && !Safe(r) {
				t.Fatalf("EscapeJSON(%q) = %q holds %U", s, out, r)
			}
		}
		var before, after any
		if json.Unmarshal([]byte(s), &before) != nil {
			return
		}
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("EscapeJSON(%q) = %q: %v", s, out, err)
		}
		if fmt.Sprint(before) != fmt.Sprint(after) {
			t.Fatalf("EscapeJSON(%q) = %q decodes to %q, want %q", s, out, after, before)
		}
	})
}
