package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// epoch is every file's modification time in the layer, so the same inputs
// give the same digests.
var epoch = time.Unix(0, 0).UTC()

// WriteLayout writes the tree as a one-layer image into an OCI image layout
// at dir (created if missing; an existing layout gets the image added), its
// manifest tagged ref in index.json, and returns the manifest's digest.
func (t *Tree) WriteLayout(dir, ref string) (digest.Digest, error) {
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return "", err
	}
	layer, diffID, err := t.writeLayer(dir)
	if err != nil {
		return "", fmt.Errorf("layer: %w", err)
	}
	img := ocispec.Image{
		Platform: ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"},
		Config:   Config(),
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
		Created:  &epoch,
	}
	cfg, err := writeJSON(dir, ocispec.MediaTypeImageConfig, img)
	if err != nil {
		return "", err
	}
	man, err := writeJSON(dir, ocispec.MediaTypeImageManifest, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfg,
		Layers:    []ocispec.Descriptor{layer},
	})
	if err != nil {
		return "", err
	}
	man.Annotations = map[string]string{ocispec.AnnotationRefName: ref}
	man.Platform = &img.Platform
	if err := writeIndex(dir, man); err != nil {
		return "", err
	}
	layout, _ := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err := os.WriteFile(filepath.Join(dir, ocispec.ImageLayoutFile), layout, 0o644); err != nil {
		return "", err
	}
	return man.Digest, nil
}

// writeIndex puts man into index.json, replacing an image of the same ref.
func writeIndex(dir string, man ocispec.Descriptor) error {
	p := filepath.Join(dir, "index.json")
	idx := ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}
	if b, err := os.ReadFile(p); err == nil {
		if err := json.Unmarshal(b, &idx); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	kept := idx.Manifests[:0]
	for _, m := range idx.Manifests {
		if m.Annotations[ocispec.AnnotationRefName] != man.Annotations[ocispec.AnnotationRefName] {
			kept = append(kept, m)
		}
	}
	idx.Manifests = append(kept, man)
	b, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

// blobWriter writes a blob to a temporary file, hashing it, and renames it
// to its digest on commit.
type blobWriter struct {
	dir string
	f   *os.File
	h   hash.Hash
	n   int64
}

func newBlob(dir string) (*blobWriter, error) {
	f, err := os.CreateTemp(filepath.Join(dir, "blobs", "sha256"), ".tmp-")
	if err != nil {
		return nil, err
	}
	return &blobWriter{dir: dir, f: f, h: sha256.New()}, nil
}

func (b *blobWriter) Write(p []byte) (int, error) {
	n, err := b.f.Write(p)
	b.h.Write(p[:n])
	b.n += int64(n)
	return n, err
}

func (b *blobWriter) commit(mediaType string) (ocispec.Descriptor, error) {
	d := digest.NewDigestFromBytes(digest.SHA256, b.h.Sum(nil))
	if err := b.f.Close(); err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := os.Rename(b.f.Name(), filepath.Join(b.dir, "blobs", "sha256", d.Encoded())); err != nil {
		return ocispec.Descriptor{}, err
	}
	return ocispec.Descriptor{MediaType: mediaType, Digest: d, Size: b.n}, nil
}

func (b *blobWriter) abort() {
	b.f.Close()
	os.Remove(b.f.Name())
}

func writeJSON(dir, mediaType string, v any) (ocispec.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	b, err := newBlob(dir)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := b.Write(data); err != nil {
		b.abort()
		return ocispec.Descriptor{}, err
	}
	return b.commit(mediaType)
}

// writeLayer writes the tree as a gzipped tar blob and returns its
// descriptor and the digest of the uncompressed tar (the config's diff id).
func (t *Tree) writeLayer(dir string) (ocispec.Descriptor, digest.Digest, error) {
	b, err := newBlob(dir)
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	zw := gzip.NewWriter(b)
	diff := sha256.New()
	tw := tar.NewWriter(io.MultiWriter(zw, diff))
	for _, e := range t.Entries() {
		if err := writeTarEntry(tw, e); err != nil {
			b.abort()
			return ocispec.Descriptor{}, "", fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		b.abort()
		return ocispec.Descriptor{}, "", err
	}
	if err := zw.Close(); err != nil {
		b.abort()
		return ocispec.Descriptor{}, "", err
	}
	desc, err := b.commit(ocispec.MediaTypeImageLayerGzip)
	return desc, digest.NewDigestFromBytes(digest.SHA256, diff.Sum(nil)), err
}

func writeTarEntry(tw *tar.Writer, e *Entry) error {
	h := &tar.Header{
		Name:    strings.TrimPrefix(e.Path, "/"),
		Mode:    tarMode(e.Mode),
		ModTime: epoch,
		Uname:   "root",
		Gname:   "root",
	}
	switch {
	case e.Mode.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		return tw.WriteHeader(h)
	case e.Mode&fs.ModeSymlink != 0:
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.Link
		return tw.WriteHeader(h)
	}
	r, size, err := e.open()
	if err != nil {
		return err
	}
	defer r.Close()
	h.Typeflag, h.Size = tar.TypeReg, size
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(tw, r)
	if err == nil && n != size {
		err = fmt.Errorf("read %d bytes, want %d (changed while read)", n, size)
	}
	return err
}

// tarMode is the permission bits in tar's (and chmod's) encoding.
func tarMode(m fs.FileMode) int64 {
	v := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return v
}
