package inspect

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"
)

func TestSmoke(t *testing.T) {
	s, err := New(Config{Key: []byte("0123456789abcdef0123")})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.canaries.For("sb1")
	key := "AKIAZ3MTXQ7RLK4PNWBE"
	for _, in := range []string{
		"aws=" + key,
		base64.StdEncoding.EncodeToString([]byte("key: " + key)),
		hex.EncodeToString([]byte(key)),
		url.QueryEscape(url.QueryEscape("x " + key + " y")),
		reverseString(key),
		"ghp_" + "abcdefghijklmnopqrstuvwxyzABCDEF1234",
		cs.Values[0], cs.Values[1], cs.Values[2], cs.Values[3],
		base64.StdEncoding.EncodeToString([]byte(cs.Values[1])),
		reverseString(cs.Values[1]),
		`{"a":"\u0041KIAZ3MTXQ7RLK4PNWBE"}`,
		"hello world, nothing here",
	} {
		fmt.Printf("%.40q -> %+v\n", in, s.Scan("body", []byte(in)))
	}
	fmt.Println(s.Scan(WhereDNS, []byte(hex.EncodeToString([]byte(key))[:20]+"."+hex.EncodeToString([]byte(key))[20:]+".evil.com")))
	fmt.Println(s.ScanFields([]Field{{Where: "url.query", Value: []byte("AKIAZ3MTXQ")}, {Where: "url.query", Value: []byte("7RLK4PNWBE")}}))
	w := s.Window("sb")
	fmt.Println(w.Add([]Field{{Where: "url.query", Value: []byte("AKIAZ3MTXQ")}}))
	fmt.Println(w.Add([]Field{{Where: "url.query", Value: []byte("7RLK4PNWBE")}}))
	fmt.Println(cs.Files, cs.Env)
}
