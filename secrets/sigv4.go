package secrets

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// AWS Signature Version 4, written from the published algorithm: a canonical
// request, the string to sign over its hash, and the signing key derived from
// the secret by HMAC over date, region, service and "aws4_request". The same
// code verifies a signature made with a placeholder secret and makes the one
// with the real secret.

const (
	sigv4Algorithm   = "AWS4-HMAC-SHA256"
	sigv4Terminator  = "aws4_request"
	sigv4TimeFormat  = "20060102T150405Z"
	sigv4DateFormat  = "20060102"
	sigv4ChunkAlgo   = "AWS4-HMAC-SHA256-PAYLOAD"
	unsignedPayload  = "UNSIGNED-PAYLOAD"
	streamingSigned  = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
	streamingTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
	emptySHA256      = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
)

// sigv4Scope is a credential scope: date/region/service/aws4_request.
type sigv4Scope struct {
	date, region, service string
}

func (s sigv4Scope) String() string {
	return s.date + "/" + s.region + "/" + s.service + "/" + sigv4Terminator
}

// sigv4Key derives the signing key of a secret for a scope.
func sigv4Key(secret string, s sigv4Scope) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), s.date)
	k = hmacSHA256(k, s.region)
	k = hmacSHA256(k, s.service)
	return hmacSHA256(k, sigv4Terminator)
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// sigv4StringToSign is the string signed for a request.
func sigv4StringToSign(amzDate string, s sigv4Scope, canonical string) string {
	return sigv4Algorithm + "\n" + amzDate + "\n" + s.String() + "\n" + sha256Hex([]byte(canonical))
}

// sigv4Sign returns the hex signature of a string to sign.
func sigv4Sign(key []byte, sts string) string {
	return hex.EncodeToString(hmacSHA256(key, sts))
}

// sigv4ChunkStringToSign is the string signed for one chunk of an
// aws-chunked body: it chains on the previous signature.
func sigv4ChunkStringToSign(amzDate string, s sigv4Scope, prevSig string, chunk []byte) string {
	return sigv4ChunkAlgo + "\n" + amzDate + "\n" + s.String() + "\n" + prevSig + "\n" +
		emptySHA256 + "\n" + sha256Hex(chunk)
}

// sigv4Parts is what a request carries of its signature, in either form.
type sigv4Parts struct {
	presigned     bool
	accessKey     string
	scope         sigv4Scope
	amzDate       string
	signedHeaders []string // lower-case, sorted as sent
	signature     string
	expires       time.Duration // presigned only
}

// parseSigv4 reads the signature of req from its Authorization header or its
// query (presigned form). Exactly one form must be present.
func parseSigv4(req *http.Request) (*sigv4Parts, error) {
	auths := req.Header.Values("Authorization")
	q := req.URL.Query()
	_, inQuery := q["X-Amz-Signature"]
	switch {
	case len(auths) > 0 && (inQuery || q.Has("X-Amz-Credential")):
		return nil, errors.New("both an Authorization header and a presigned query")
	case len(auths) > 1:
		return nil, errors.New("more than one Authorization header")
	case len(auths) == 1:
		return parseSigv4Header(req, auths[0])
	case inQuery:
		return parseSigv4Query(q)
	}
	return nil, errors.New("the request is not signed with SigV4")
}

func parseSigv4Header(req *http.Request, auth string) (*sigv4Parts, error) {
	alg, rest, ok := strings.Cut(auth, " ")
	if !ok || alg != sigv4Algorithm {
		return nil, fmt.Errorf("authorization: algorithm is not %s", sigv4Algorithm)
	}
	p := &sigv4Parts{}
	seen := map[string]bool{}
	for _, f := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || seen[k] {
			return nil, fmt.Errorf("authorization: malformed or repeated field %q", k)
		}
		seen[k] = true
		switch k {
		case "Credential":
			if err := p.setCredential(v); err != nil {
				return nil, err
			}
		case "SignedHeaders":
			p.signedHeaders = strings.Split(v, ";")
		case "Signature":
			p.signature = v
		default:
			return nil, fmt.Errorf("authorization: unknown field %q", k)
		}
	}
	if len(seen) != 3 {
		return nil, errors.New("authorization: needs Credential, SignedHeaders and Signature")
	}
	dates := req.Header.Values("X-Amz-Date")
	if len(dates) != 1 {
		return nil, errors.New("x-amz-date: exactly one header is required")
	}
	p.amzDate = dates[0]
	return p, p.check()
}

func parseSigv4Query(q url.Values) (*sigv4Parts, error) {
	one := func(k string) (string, error) {
		if len(q[k]) != 1 {
			return "", fmt.Errorf("query: exactly one %s is required", k)
		}
		return q[k][0], nil
	}
	p := &sigv4Parts{presigned: true}
	var err error
	var alg, cred, sh, exp string
	for _, f := range []struct {
		k string
		v *string
	}{{"X-Amz-Algorithm", &alg}, {"X-Amz-Credential", &cred}, {"X-Amz-Date", &p.amzDate},
		{"X-Amz-SignedHeaders", &sh}, {"X-Amz-Signature", &p.signature}, {"X-Amz-Expires", &exp}} {
		if *f.v, err = one(f.k); err != nil {
			return nil, err
		}
	}
	if alg != sigv4Algorithm {
		return nil, fmt.Errorf("query: X-Amz-Algorithm is not %s", sigv4Algorithm)
	}
	if err := p.setCredential(cred); err != nil {
		return nil, err
	}
	p.signedHeaders = strings.Split(sh, ";")
	secs, err := strconv.Atoi(exp)
	if err != nil || secs < 1 || secs > 7*24*3600 {
		return nil, fmt.Errorf("query: X-Amz-Expires %q is not 1..604800 seconds", exp)
	}
	p.expires = time.Duration(secs) * time.Second
	return p, p.check()
}

func (p *sigv4Parts) setCredential(v string) error {
	f := strings.Split(v, "/")
	if len(f) != 5 || f[4] != sigv4Terminator || f[0] == "" {
		return errors.New("credential: not access-key/date/region/service/aws4_request")
	}
	p.accessKey = f[0]
	p.scope = sigv4Scope{date: f[1], region: f[2], service: f[3]}
	return nil
}

// check validates the shape of what was parsed: the date, the scope's date,
// the signed header list (sorted, lower-case, with host) and the signature.
func (p *sigv4Parts) check() error {
	if _, err := time.Parse(sigv4TimeFormat, p.amzDate); err != nil {
		return fmt.Errorf("x-amz-date: %q is not yyyymmddThhmmssZ", p.amzDate)
	}
	if p.scope.date != p.amzDate[:8] {
		return errors.New("credential: scope date is not the date of x-amz-date")
	}
	if len(p.signature) != 64 || strings.Trim(p.signature, "0123456789abcdef") != "" {
		return errors.New("signature: not 64 lower-case hex digits")
	}
	host := false
	for i, h := range p.signedHeaders {
		if h == "" || h != strings.ToLower(h) || (i > 0 && p.signedHeaders[i-1] >= h) {
			return errors.New("signed headers: not a sorted list of distinct lower-case names")
		}
		if h == "authorization" {
			return errors.New("signed headers: authorization cannot be signed")
		}
		host = host || h == "host"
	}
	if !host {
		return errors.New("signed headers: host must be signed")
	}
	return nil
}

// sigv4Request is what the canonical request is built from.
type sigv4Request struct {
	method        string
	escapedPath   string
	rawQuery      string
	host          string // the Host value as signed
	header        http.Header
	contentLength int64
	// transferEncoding is the request's Transfer-Encoding, which net/http
	// moves out of the header (the aws CLI signs it on an aws-chunked
	// upload: "transfer-encoding:chunked").
	transferEncoding []string
	signedHeaders    []string
	payloadHash      string
	presigned        bool // drop X-Amz-Signature from the query
	s3               bool // S3 paths are not encoded a second time
}

// canonical returns the canonical request.
func (r *sigv4Request) canonical() (string, error) {
	var b strings.Builder
	b.WriteString(r.method)
	b.WriteByte('\n')
	path := r.escapedPath
	if path == "" {
		path = "/"
	}
	if !r.s3 {
		path = awsEscape(path, false)
	}
	b.WriteString(path)
	b.WriteByte('\n')
	q, err := r.canonicalQuery()
	if err != nil {
		return "", err
	}
	b.WriteString(q)
	b.WriteByte('\n')
	for _, h := range r.signedHeaders {
		v, err := r.headerValue(h)
		if err != nil {
			return "", err
		}
		b.WriteString(h)
		b.WriteByte(':')
		b.WriteString(v)
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	b.WriteString(strings.Join(r.signedHeaders, ";"))
	b.WriteByte('\n')
	b.WriteString(r.payloadHash)
	return b.String(), nil
}

func (r *sigv4Request) headerValue(name string) (string, error) {
	switch name {
	case "host":
		return r.host, nil
	case "content-length":
		if r.contentLength < 0 {
			return "", errors.New("content-length is signed but the body has no length")
		}
		return strconv.FormatInt(r.contentLength, 10), nil
	case "transfer-encoding":
		if len(r.transferEncoding) > 0 {
			return strings.Join(r.transferEncoding, ","), nil
		}
	}
	vals := r.header.Values(name)
	if len(vals) == 0 {
		return "", fmt.Errorf("signed header %q is missing", name)
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = strings.Join(strings.Fields(v), " ")
	}
	return strings.Join(out, ","), nil
}

func (r *sigv4Request) canonicalQuery() (string, error) {
	if r.rawQuery == "" {
		return "", nil
	}
	type kv struct{ k, v string }
	var pairs []kv
	for _, part := range strings.Split(r.rawQuery, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		dk, err1 := url.QueryUnescape(k)
		dv, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			return "", errors.New("query does not decode")
		}
		if r.presigned && dk == "X-Amz-Signature" {
			continue
		}
		pairs = append(pairs, kv{awsEscape(dk, true), awsEscape(dv, true)})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].k != pairs[j].k {
			return pairs[i].k < pairs[j].k
		}
		return pairs[i].v < pairs[j].v
	})
	out := make([]string, len(pairs))
	for i, p := range pairs {
		out[i] = p.k + "=" + p.v
	}
	return strings.Join(out, "&"), nil
}

// awsEscape percent-encodes every byte but the unreserved A-Z a-z 0-9 - _ . ~
// (and '/' unless slash is set) with upper-case hex, as SigV4 specifies.
func awsEscape(s string, slash bool) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == '~' || (c == '/' && !slash) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&15])
	}
	return b.String()
}

// signature computes the hex signature of r with secret for scope at amzDate.
func (r *sigv4Request) signature(secret string, s sigv4Scope, amzDate string) (string, error) {
	c, err := r.canonical()
	if err != nil {
		return "", err
	}
	return sigv4Sign(sigv4Key(secret, s), sigv4StringToSign(amzDate, s, c)), nil
}
