package fakeaws

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// Config is the real credentials and what the endpoint serves.
type Config struct {
	Service      string // "s3" or "sts"
	Region       string
	AccessKeyID  string
	Secret       string
	SessionToken string // required on every request when set
	// Account is the account id GetCallerIdentity answers. Default 123456789012.
	Account string
	// Keys, when set, holds further credentials this server accepts; an STS
	// server adds the temporary credentials its AssumeRole issues, so an S3
	// server sharing Keys accepts them.
	Keys *Keys
}

// Keys is a set of credentials, shared by fake servers.
type Keys struct {
	mu sync.Mutex
	m  map[string]aws.Credentials
}

// Add makes c acceptable.
func (k *Keys) Add(c aws.Credentials) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.m == nil {
		k.m = map[string]aws.Credentials{}
	}
	k.m[c.AccessKeyID] = c
}

// Expire makes a key id's credentials stop verifying.
func (k *Keys) Expire(keyID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, keyID)
}

func (k *Keys) get(id string) (aws.Credentials, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.m[id]
	return c, ok
}

// Issued is one AssumeRole answer.
type Issued struct {
	Role, Session, Policy string
	Duration              time.Duration
	KeyID                 string
	Caller                string // the access key id that signed the call
}

// Seen is one request as it arrived, with its raw body.
type Seen struct {
	Method, Host, URL string
	Header            http.Header
	Body              []byte
	Verified          bool
	Err               string
	// Checksum names the aws-chunked trailer checksum that was verified
	// against the decoded body (x-amz-checksum-crc32, ...); "" for none.
	Checksum string
}

// Server is a fake S3 or STS endpoint.
type Server struct {
	cfg       Config
	mu        sync.Mutex
	seen      []Seen
	objs      map[string][]byte
	issued    []Issued
	parts     map[string]map[int][]byte // open multipart uploads
	partsSeen int
}

// Issued returns what AssumeRole handed out.
func (s *Server) Issued() []Issued {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Issued(nil), s.issued...)
}

// New returns a server for cfg.
func New(cfg Config) *Server {
	if cfg.Account == "" {
		cfg.Account = "123456789012"
	}
	return &Server{cfg: cfg, objs: map[string][]byte{}, parts: map[string]map[int][]byte{}}
}

// Requests returns every request the server received.
func (s *Server) Requests() []Seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Seen(nil), s.seen...)
}

// Object returns a stored S3 object by path ("/bucket/key").
func (s *Server) Object(path string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objs[path]
	return b, ok
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	rec := Seen{Method: r.Method, Host: r.Host, URL: r.URL.String(), Header: r.Header.Clone(), Body: body}
	if err == nil {
		body, err = s.verify(r, body)
	}
	rec.Verified = err == nil
	if err != nil {
		rec.Err = err.Error()
	}
	rec.Checksum = r.Header.Get(checkedHeader)
	s.mu.Lock()
	s.seen = append(s.seen, rec)
	s.mu.Unlock()
	if err != nil {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "<Error><Code>SignatureDoesNotMatch</Code><Message>%s</Message><AWSAccessKeyId>%s</AWSAccessKeyId></Error>",
			xmlEscape(err.Error()), xmlEscape(s.cfg.AccessKeyID))
		return
	}
	if s.cfg.Service == "sts" {
		s.sts(w, r, body)
		return
	}
	s.s3(w, r, body)
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// verify checks r's signature with the real credentials by signing the same
// request again with the SDK's signer, and returns the decoded body.
func (s *Server) verify(r *http.Request, body []byte) ([]byte, error) {
	if r.URL.Query().Has("X-Amz-Signature") {
		return body, s.verifyPresigned(r)
	}
	auth := r.Header.Get("Authorization")
	cred, signed, sig, err := parseAuth(auth)
	if err != nil {
		return nil, err
	}
	t, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return nil, errors.New("bad x-amz-date")
	}
	creds, err := s.checkCred(cred, t)
	if err != nil {
		return nil, err
	}
	if creds.SessionToken != "" && r.Header.Get("X-Amz-Security-Token") != creds.SessionToken {
		return nil, errors.New("missing or wrong session token")
	}
	hash := r.Header.Get("X-Amz-Content-Sha256")
	if hash == "" {
		hash = hexSHA(body)
	} else if len(hash) == 64 && hash != hexSHA(body) {
		return nil, errors.New("x-amz-content-sha256 does not match the body")
	}
	c := s.clone(r, signed, body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, c, hash, s.cfg.Service, s.cfg.Region, t,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = s.cfg.Service == "s3" }); err != nil {
		return nil, err
	}
	_, _, want, _ := parseAuth(c.Header.Get("Authorization"))
	if want != sig {
		return nil, errors.New("the request signature we calculated does not match the signature you provided")
	}
	r.Header.Set("X-Fake-Caller", creds.AccessKeyID)
	var out []byte
	var trailers map[string]string
	switch hash {
	case "STREAMING-AWS4-HMAC-SHA256-PAYLOAD":
		out, trailers, err = s.unchunk(body, creds, sig, t, true)
	case "STREAMING-UNSIGNED-PAYLOAD-TRAILER":
		out, trailers, err = s.unchunk(body, creds, "", t, false)
	default:
		return body, nil
	}
	if err != nil {
		return nil, err
	}
	if err := checkTrailer(r, out, trailers); err != nil {
		return nil, err
	}
	return out, nil
}

// checkedHeader carries, from verify to the record, the name of the
// trailer checksum that matched.
const checkedHeader = "X-Fake-Checksum-Verified"

// checkTrailer checks an aws-chunked body's decoded length against
// X-Amz-Decoded-Content-Length and the checksum trailer X-Amz-Trailer names
// against the decoded body, as S3 does.
func checkTrailer(r *http.Request, out []byte, trailers map[string]string) error {
	if dl := r.Header.Get("X-Amz-Decoded-Content-Length"); dl != "" && dl != strconv.Itoa(len(out)) {
		return fmt.Errorf("x-amz-decoded-content-length %s, but the chunks hold %d bytes", dl, len(out))
	}
	name := strings.ToLower(r.Header.Get("X-Amz-Trailer"))
	if name == "" {
		return nil
	}
	got, ok := trailers[name]
	if !ok {
		return fmt.Errorf("x-amz-trailer names %s, which the body does not carry", name)
	}
	var sum []byte
	switch name {
	case "x-amz-checksum-crc32":
		sum = binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(out))
	case "x-amz-checksum-crc32c":
		sum = binary.BigEndian.AppendUint32(nil, crc32.Checksum(out, crc32.MakeTable(crc32.Castagnoli)))
	case "x-amz-checksum-sha256":
		h := sha256.Sum256(out)
		sum = h[:]
	case "x-amz-checksum-sha1":
		h := sha1.Sum(out)
		sum = h[:]
	default:
		return fmt.Errorf("trailer %s: not a checksum this fake knows", name)
	}
	if want := base64.StdEncoding.EncodeToString(sum); got != want {
		return fmt.Errorf("trailer %s is %s, the decoded body's is %s", name, got, want)
	}
	r.Header.Set(checkedHeader, name)
	return nil
}

// checkCred returns the credentials of the access key id cred names, if the
// server knows it and the scope is its own.
func (s *Server) checkCred(cred string, t time.Time) (aws.Credentials, error) {
	id, scope, _ := strings.Cut(cred, "/")
	want := t.UTC().Format("20060102") + "/" + s.cfg.Region + "/" + s.cfg.Service + "/aws4_request"
	if scope != want {
		return aws.Credentials{}, fmt.Errorf("credential scope %q is not this endpoint's", scope)
	}
	if id == s.cfg.AccessKeyID {
		return aws.Credentials{AccessKeyID: id, SecretAccessKey: s.cfg.Secret, SessionToken: s.cfg.SessionToken}, nil
	}
	if s.cfg.Keys != nil {
		if c, ok := s.cfg.Keys.get(id); ok {
			return c, nil
		}
	}
	return aws.Credentials{}, errors.New("the access key id does not exist in our records")
}

// clone returns a request holding only what was signed, for the SDK to sign.
func (s *Server) clone(r *http.Request, signed []string, body []byte) *http.Request {
	u := *r.URL
	u.Scheme, u.Host = "https", r.Host
	c, _ := http.NewRequest(r.Method, u.String(), nil)
	c.URL.RawPath, c.URL.Path, c.URL.RawQuery = r.URL.RawPath, r.URL.Path, r.URL.RawQuery
	c.Host = r.Host
	for _, h := range signed {
		switch h {
		case "host":
		case "content-length":
			c.ContentLength = r.ContentLength
		case "transfer-encoding":
			// net/http moved it out of the header; the SDK's signer leaves
			// "Transfer-Encoding" out of what it signs, as a client's
			// choice, but a signature that covers it (the aws CLI's
			// aws-chunked uploads) is checked over it, as S3 does: the
			// lower-case key is not on the SDK's list of ignored headers.
			te := r.TransferEncoding
			if len(te) == 0 {
				te = r.Header.Values("Transfer-Encoding")
			}
			if len(te) > 0 {
				c.Header["transfer-encoding"] = []string{strings.Join(te, ",")}
			}
		default:
			c.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	if c.ContentLength == 0 && len(body) > 0 && !contains(signed, "content-length") {
		c.ContentLength = 0
	}
	return c
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func (s *Server) verifyPresigned(r *http.Request) error {
	q := r.URL.Query()
	t, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		return errors.New("bad X-Amz-Date")
	}
	creds, err := s.checkCred(q.Get("X-Amz-Credential"), t)
	if err != nil {
		return err
	}
	if creds.SessionToken != "" && q.Get("X-Amz-Security-Token") != creds.SessionToken {
		return errors.New("missing or wrong session token")
	}
	sig := q.Get("X-Amz-Signature")
	for _, k := range []string{"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders",
		"X-Amz-Signature", "X-Amz-Security-Token"} {
		q.Del(k)
	}
	c := s.clone(r, strings.Split(r.URL.Query().Get("X-Amz-SignedHeaders"), ";"), nil)
	c.URL.RawQuery = q.Encode()
	hash := "UNSIGNED-PAYLOAD"
	if s.cfg.Service != "s3" {
		hash = hexSHA(nil)
	}
	signedURL, _, err := v4.NewSigner().PresignHTTP(context.Background(), creds, c, hash, s.cfg.Service, s.cfg.Region, t,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = s.cfg.Service == "s3" })
	if err != nil {
		return err
	}
	u, err := url.Parse(signedURL)
	if err != nil || u.Query().Get("X-Amz-Signature") != sig {
		return errors.New("the presigned signature does not match")
	}
	return nil
}

func parseAuth(auth string) (cred string, signed []string, sig string, err error) {
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return "", nil, "", errors.New("not a SigV4 Authorization header")
	}
	for _, f := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signed = strings.Split(v, ";")
		case "Signature":
			sig = v
		}
	}
	if cred == "" || sig == "" || len(signed) == 0 {
		return "", nil, "", errors.New("incomplete Authorization header")
	}
	return cred, signed, sig, nil
}

func hexSHA(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// unchunk decodes an aws-chunked body, checking each chunk signature with the
// SDK's stream signer when signedChunks is set, and returns the decoded body
// and the trailers after the last chunk (names lower-cased).
func (s *Server) unchunk(body []byte, creds aws.Credentials, seed string, t time.Time, signedChunks bool) ([]byte, map[string]string, error) {
	var ss *v4.StreamSigner
	if signedChunks {
		sb, err := hex.DecodeString(seed)
		if err != nil {
			return nil, nil, err
		}
		ss = v4.NewStreamSigner(creds, s.cfg.Service, s.cfg.Region, sb)
	}
	br := bufio.NewReader(bytes.NewReader(body))
	var out []byte
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, nil, errors.New("aws-chunked: truncated")
		}
		line = strings.TrimSuffix(line, "\r\n")
		sizeHex, ext, _ := strings.Cut(line, ";")
		size, err := strconv.ParseUint(sizeHex, 16, 32)
		if err != nil {
			return nil, nil, errors.New("aws-chunked: bad size")
		}
		data := make([]byte, size)
		if _, err := io.ReadFull(br, data); err != nil {
			return nil, nil, errors.New("aws-chunked: short chunk")
		}
		if ss != nil {
			got, _ := strings.CutPrefix(ext, "chunk-signature=")
			want, _ := ss.GetSignature(context.Background(), nil, data, t)
			if got != hex.EncodeToString(want) {
				return nil, nil, errors.New("aws-chunked: chunk signature does not match")
			}
		}
		out = append(out, data...)
		if size == 0 {
			trailers, err := readTrailers(br)
			return out, trailers, err
		}
		if crlf, _ := br.ReadString('\n'); crlf != "\r\n" {
			return nil, nil, errors.New("aws-chunked: missing CRLF")
		}
	}
}

// readTrailers reads "name:value" lines up to the empty line that ends an
// aws-chunked body (or its end).
func readTrailers(br *bufio.Reader) (map[string]string, error) {
	trailers := map[string]string{}
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimSuffix(line, "\r\n")
		if line == "" {
			return trailers, nil
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, errors.New("aws-chunked: a trailer line without a colon")
		}
		trailers[strings.ToLower(strings.TrimSpace(name))] = strings.TrimSpace(value)
		if err != nil {
			return trailers, nil
		}
	}
}

func (s *Server) s3(w http.ResponseWriter, r *http.Request, body []byte) {
	key, q := r.URL.Path, r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Has("uploads"):
		id := randHex(8)
		s.mu.Lock()
		s.parts[id] = map[int][]byte{}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprintf(w, "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>%s</Key><UploadId>%s</UploadId></InitiateMultipartUploadResult>",
			xmlEscape(key), id)
	case r.Method == http.MethodPut && q.Has("uploadId"):
		n, _ := strconv.Atoi(q.Get("partNumber"))
		s.mu.Lock()
		up, ok := s.parts[q.Get("uploadId")]
		if ok {
			up[n] = body
			s.partsSeen++
		}
		s.mu.Unlock()
		if !ok || n < 1 {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("ETag", etag(body))
	case r.Method == http.MethodPost && q.Has("uploadId"):
		s.mu.Lock()
		up, ok := s.parts[q.Get("uploadId")]
		var all []byte
		for i := 1; ok && i <= len(up); i++ {
			all = append(all, up[i]...)
		}
		if ok {
			s.objs[key] = all
			delete(s.parts, q.Get("uploadId"))
		}
		s.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprintf(w, "<CompleteMultipartUploadResult><Key>%s</Key><ETag>%s</ETag></CompleteMultipartUploadResult>",
			xmlEscape(key), xmlEscape(etag(all)))
	case r.Method == http.MethodPut:
		s.mu.Lock()
		s.objs[key] = body
		s.mu.Unlock()
		w.Header().Set("ETag", etag(body))
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		s.get(w, r, key)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// get serves an object, or one byte range of it (206).
func (s *Server) get(w http.ResponseWriter, r *http.Request, key string) {
	b, ok := s.Object(key)
	if !ok {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message></Error>")
		return
	}
	w.Header().Set("ETag", etag(b))
	w.Header().Set("Last-Modified", time.Unix(1700000000, 0).UTC().Format(http.TimeFormat))
	w.Header().Set("Accept-Ranges", "bytes")
	status, part := http.StatusOK, b
	from, to := 0, len(b)-1
	n, _ := fmt.Sscanf(r.Header.Get("Range"), "bytes=%d-%d", &from, &to) // "bytes=N-" reads one
	if n >= 1 && from <= to && from < len(b) {
		to = min(to, len(b)-1)
		status, part = http.StatusPartialContent, b[from:to+1]
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(b)))
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(part)))
	w.WriteHeader(status)
	if r.Method == http.MethodGet {
		w.Write(part)
	}
}

func etag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

// Parts returns the number of multipart upload parts received.
func (s *Server) Parts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.partsSeen
}

func (s *Server) sts(w http.ResponseWriter, r *http.Request, body []byte) {
	form, _ := url.ParseQuery(string(body))
	if form.Get("Action") == "AssumeRole" {
		s.assumeRole(w, r, form)
		return
	}
	if form.Get("Action") != "GetCallerIdentity" {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, "<ErrorResponse><Error><Code>InvalidAction</Code></Error></ErrorResponse>")
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><GetCallerIdentityResult>`+
		`<Arn>arn:aws:iam::%[1]s:user/airlock-test</Arn><UserId>AIDAFAKEUSER</UserId><Account>%[1]s</Account>`+
		`</GetCallerIdentityResult><ResponseMetadata><RequestId>fake</RequestId></ResponseMetadata></GetCallerIdentityResponse>`,
		s.cfg.Account)
}

// assumeRole issues random temporary credentials, added to Config.Keys.
func (s *Server) assumeRole(w http.ResponseWriter, r *http.Request, form url.Values) {
	secs, _ := strconv.Atoi(form.Get("DurationSeconds"))
	if s.cfg.Keys == nil || form.Get("RoleArn") == "" || form.Get("RoleSessionName") == "" || secs < 900 {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, "<ErrorResponse><Error><Code>ValidationError</Code><Message>bad AssumeRole</Message></Error></ErrorResponse>")
		return
	}
	c := aws.Credentials{AccessKeyID: "ASIA" + strings.ToUpper(randHex(8)), SecretAccessKey: "tmp-" + randHex(20),
		SessionToken: "tok-" + randHex(32)}
	s.cfg.Keys.Add(c)
	exp := time.Now().Add(time.Duration(secs) * time.Second).UTC()
	s.mu.Lock()
	s.issued = append(s.issued, Issued{Role: form.Get("RoleArn"), Session: form.Get("RoleSessionName"),
		Policy: form.Get("Policy"), Duration: time.Duration(secs) * time.Second, KeyID: c.AccessKeyID,
		Caller: r.Header.Get("X-Fake-Caller")})
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml")
	fmt.Fprintf(w, `<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><AssumeRoleResult><Credentials>`+
		`<AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey><SessionToken>%s</SessionToken>`+
		`<Expiration>%s</Expiration></Credentials></AssumeRoleResult></AssumeRoleResponse>`,
		c.AccessKeyID, c.SecretAccessKey, c.SessionToken, exp.Format(time.RFC3339))
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
