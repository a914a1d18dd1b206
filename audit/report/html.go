package report

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strconv"

	"github.com/airlock-dev/airlock/termtext"
)

// The page's parts, inlined into every report: nothing is fetched.
var (
	//go:embed page/report.html.tmpl
	pageTemplate string
	//go:embed page/report.css
	pageCSS string
	//go:embed page/report.js
	pageJS string
)

// aggregates encodes the report: WriteJSON and WriteHTML both
// write exactly these bytes.
func (r *Report) aggregates() ([]byte, error) {
	// encoding/json escapes <, > and & (and U+2028, U+2029), so the bytes
	// cannot close the <script> element they are embedded in.
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	return b, nil
}

// csp allows the page's own inline style and script, by hash, and nothing
// else: no fetch, no image, no frame, even if a logged value became markup.
func csp() string {
	h := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return "default-src 'none'; script-src " + h(pageJS) + "; style-src " + h(pageCSS) +
		"; img-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'"
}

// WriteHTML writes the self-contained page: the aggregates as JSON (the same
// bytes WriteJSON writes), the headline rendered for reading without
// script, and the inline script that draws and filters the rest.
func (r *Report) WriteHTML(w io.Writer) error {
	data, err := r.aggregates()
	if err != nil {
		return err
	}
	// shown: text from the log is escaped as on a terminal, so a bidi
	// override or an invisible character cannot reorder or hide what the
	// page shows (html/template escapes markup; the script does the same
	// for what it draws).
	t, err := template.New("report").Funcs(template.FuncMap{"num": formatCount, "bytes": formatBytes, "shown": termtext.Escape}).Parse(pageTemplate)
	if err != nil {
		return fmt.Errorf("report: page template: %w", err)
	}
	var buf bytes.Buffer
	err = t.Execute(&buf, map[string]any{
		"R":    r,
		"CSP":  csp(),
		"CSS":  template.CSS(pageCSS),
		"JS":   template.JS(pageJS),
		"Data": template.JS(data),
	})
	if err != nil {
		return fmt.Errorf("report: page: %w", err)
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// WriteJSON writes the aggregates, one line of JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	data, err := r.aggregates()
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// formatCount writes n with thousands separators, as the page's script does.
func formatCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var b []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b = append(b, ',')
		}
		b = append(b, s[i])
	}
	if neg {
		return "-" + string(b)
	}
	return string(b)
}

// formatBytes writes n in binary units, as the page's script does.
func formatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(n), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatInt(n, 10) + " B"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[i]
}
