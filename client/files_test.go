package client_test

import (
	"archive/tar"
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// tree describes a directory: path -> "file:CONTENT", "dir", "link:TARGET".
type tree map[string]string

func makeTree(t *testing.T, root string, tr tree) {
	t.Helper()
	paths := make([]string, 0, len(tr))
	for p := range tr {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		kind, arg, _ := strings.Cut(tr[p], ":")
		var err error
		switch kind {
		case "file":
			err = os.WriteFile(full, []byte(arg), 0o640)
		case "exe":
			err = os.WriteFile(full, []byte(arg), 0o755)
		case "dir":
			err = os.MkdirAll(full, 0o750)
		case "link":
			err = os.Symlink(arg, full)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// readTree is the inverse of makeTree, with modes for files.
func readTree(t *testing.T, root string) tree {
	t.Helper()
	out := tree{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			out[rel] = "link:" + target
		case fi.IsDir():
			out[rel] = "dir"
		default:
			b, _ := os.ReadFile(p)
			kind := "file"
			if fi.Mode().Perm()&0o100 != 0 {
				kind = "exe"
			}
			out[rel] = kind + ":" + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, got, want tree) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d entries %v, want %d %v", len(got), got, len(want), want)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: got %q, want %q", p, got[p], w)
		}
	}
}

// TestCopyRoundTrip: a directory and a single file go into a sandbox and come
// back unchanged (contents, executable bits, empty directories, symlinks as
// links).
func TestCopyRoundTrip(t *testing.T) {
	srv, c := newFake(t)
	ctx := t.Context()
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	src := filepath.Join(t.TempDir(), "proj")
	want := tree{"main.go": "file:package main\n", "run.sh": "exe:#!/bin/sh\n", "empty": "dir",
		"deep/er/x.txt": "file:x", "deep": "dir", "deep/er": "dir", "link": "link:../outside/target"}
	makeTree(t, src, want)
	res, err := c.CopyTo(ctx, sb.ID, src, api.WorkspaceDir+"/in")
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 8 || res.Bytes != int64(len("package main\n#!/bin/sh\nx")) {
		t.Errorf("put result: got %+v, want 8 entries", res)
	}
	sameTree(t, readTree(t, filepath.Join(srv.Dir(sb.ID), "in", "proj")), want)

	dst := t.TempDir()
	got, err := c.CopyFrom(ctx, sb.ID, api.WorkspaceDir+"/in/proj", dst)
	if err != nil {
		t.Fatal(err)
	}
	if got.Files != 8 {
		t.Errorf("get result: got %+v, want 8 entries", got)
	}
	sameTree(t, readTree(t, filepath.Join(dst, "proj")), want)

	// One file, into a directory that does not exist yet.
	if _, err := c.CopyFrom(ctx, sb.ID, api.WorkspaceDir+"/in/proj/run.sh", filepath.Join(dst, "new")); err != nil {
		t.Fatal(err)
	}
	sameTree(t, readTree(t, filepath.Join(dst, "new")), tree{"run.sh": "exe:#!/bin/sh\n"})
}

func TestCopyToRefusesSpecialFiles(t *testing.T) {
	srv, c := newFake(t)
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "ok"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mkfifo(filepath.Join(src, "pipe")); err != nil {
		t.Fatal(err)
	}
	_, err := c.CopyTo(t.Context(), sb.ID, src, api.WorkspaceDir)
	if err == nil || !strings.Contains(err.Error(), "pipe: a fifo cannot be copied") {
		t.Fatalf("got %v, want a refusal naming the fifo", err)
	}
	for _, r := range srv.Requests() {
		if strings.Contains(r, "/files") {
			t.Errorf("a request was sent: %s", r)
		}
	}
}

// TestExtractTarRefusesEscapes: a tar stream from a sandbox (whose content
// the sandbox's code controls) cannot write outside the local directory it is
// extracted into. The canary directory beside it must stay empty and the
// file outside unchanged.
func TestExtractTarRefusesEscapes(t *testing.T) {
	type entry struct {
		h    tar.Header
		body string
	}
	file := func(name string) entry {
		return entry{h: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: 5}, body: "owned"}
	}
	link := func(name, target string) entry {
		return entry{h: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target}}
	}
	tests := []struct {
		name    string
		entries func(outside string) []entry
		// planted is made in the destination before the extraction.
		planted func(t *testing.T, dst, outside string)
		want    string
	}{
		{"dotdot", func(string) []entry { return []entry{file("../canary/x")} }, nil, "`..` component"},
		{"dotdot inside", func(string) []entry { return []entry{file("a/../../canary/x")} }, nil, "`..` component"},
		{"absolute", func(o string) []entry { return []entry{file(o + "/x")} }, nil, "an absolute name"},
		{"through a link it made", func(o string) []entry { return []entry{link("l", o), file("l/x")} }, nil, "entry l/x"},
		{"through a relative link it made", func(string) []entry { return []entry{link("l", "../canary"), file("l/x")} }, nil, "entry l/x"},
		{"directory through a link", func(o string) []entry {
			return []entry{link("l", o), {h: tar.Header{Typeflag: tar.TypeDir, Name: "l/sub/", Mode: 0o755}}}
		}, nil, "entry l/sub/"},
		{"through a link already there", func(string) []entry { return []entry{file("pre/x")} },
			func(t *testing.T, dst, o string) {
				if err := os.Symlink(o, filepath.Join(dst, "pre")); err != nil {
					t.Fatal(err)
				}
			}, "entry pre/x"},
		{"hard link", func(o string) []entry {
			return []entry{{h: tar.Header{Typeflag: tar.TypeLink, Name: "h", Linkname: o + "/x"}}}
		}, nil, "type '1' refused"},
		{"device", func(string) []entry {
			return []entry{{h: tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}}}
		}, nil, "type '3' refused"},
		{"file over a directory", func(string) []entry {
			return []entry{{h: tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755}}, file("d")}
		}, nil, "a directory is in the way"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			dst, outside := filepath.Join(base, "dst"), filepath.Join(base, "canary")
			for _, d := range []string{dst, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tt.planted != nil {
				tt.planted(t, dst, outside)
			}
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			for _, e := range tt.entries(outside) {
				if err := tw.WriteHeader(&e.h); err != nil {
					t.Fatal(err)
				}
				io.WriteString(tw, e.body)
			}
			tw.Close()
			_, err := client.ExtractTar(&buf, dst)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error naming %q", err, tt.want)
			}
			if left, _ := os.ReadDir(outside); len(left) != 0 {
				t.Errorf("written outside the destination: %v", left)
			}
		})
	}
}

// TestExtractTarClearsSpecialBits: setuid, setgid and sticky bits from a
// sandbox never reach the local files.
func TestExtractTarClearsSpecialBits(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "suid", Mode: 0o4755})
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "sgid/", Mode: 0o3775})
	tw.Close()
	dst := t.TempDir()
	if _, err := client.ExtractTar(&buf, dst); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{"suid": 0o755, "sgid": fs.ModeDir | 0o775} {
		fi, err := os.Lstat(filepath.Join(dst, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: got %v, %v; want %v", name, fi.Mode(), err, want)
		}
	}
}

// TestFilesEscapesRefusedByServer: paths the contract refuses come back as
// invalid_path errors through the client, and nothing outside the
// workspace is read or written (the fake's own checks; the real daemon's are
// pinned by the root suite).
func TestFilesEscapesRefusedByServer(t *testing.T) {
	srv, c := newFake(t)
	ctx := t.Context()
	sb := newSandbox(t, c, api.CreateSandboxRequest{})
	if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"ln", "-s", "/etc", "etc"}}, client.ExecIO{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/workspace/../etc", "/etc", "etc", "/workspace/etc/passwd"} {
		t.Run("get "+p, func(t *testing.T) {
			r, err := c.GetFiles(ctx, sb.ID, p)
			if client.Code(err) != api.CodeInvalidPath {
				if r != nil {
					r.Close()
				}
				t.Fatalf("got %v, want invalid_path", err)
			}
		})
	}
	src := filepath.Join(t.TempDir(), "x")
	os.WriteFile(src, []byte("x"), 0o644)
	for _, dir := range []string{"/workspace/../tmp", "/tmp", "/workspace/etc"} {
		t.Run("put "+dir, func(t *testing.T) {
			if _, err := c.CopyTo(ctx, sb.ID, src, dir); client.Code(err) != api.CodeInvalidPath {
				t.Fatalf("got %v, want invalid_path", err)
			}
		})
	}
	if _, err := os.Stat("/etc/x"); err == nil {
		t.Fatal("/etc/x was written")
	}
	_ = srv
}
func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
