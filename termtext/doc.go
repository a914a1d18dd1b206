// Package termtext owns the one rule for putting untrusted text in front of a
// person: a host, path, header name, DNS name, label, argv, file name or error
// that came from a sandbox or an audit file is printed through Escape, so it
// cannot move the cursor, erase or rewrite lines, set a window title or the
// clipboard, open a hyperlink, or reorder and hide what is shown around it.
//
// A rune is shown as itself when strconv.IsPrint says it is printable and it
// is not a backslash. Everything else is written as an escape that names it:
// a backslash as \\, tab, newline and carriage return as \t \n \r, other C0
// controls and DEL as \xHH, each byte of invalid UTF-8 as \xHH (raw C1 bytes
// 0x80-0x9F included), and other runes (C1 controls, bidi overrides, isolates
// and marks, zero-width and other format characters, line and paragraph
// separators, spaces other than U+0020) as \uHHHH or \UHHHHHHHH. The result is
// valid UTF-8, and different inputs give different outputs.
//
// EscapeJSON applies the same rule inside the strings of a JSON text, writing
// what it must escape as JSON \u escapes, so it decodes to the same values.
//
// Entry points: Escape, EscapeJSON, Safe.
//
// termtext must never import: any other airlock package.
package termtext
