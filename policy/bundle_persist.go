package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
)

// Files of BundleConfig.PersistDir.
const (
	persistBundleFile = "bundle.tar.gz"
	persistETagFile   = "bundle.etag"
)

// persist keeps c's tarball and ETag in PersistDir, each written to a
// temporary file, synced and renamed over the old one, so a crash leaves the
// previous good bundle or the new one, never half of either.
func (s *bundleSource) persist(c *bundleContent) error {
	dir := s.cfg.PersistDir
	if dir == "" || c.raw == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("persist dir: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, persistBundleFile), c.raw); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, persistETagFile), []byte(c.etag))
}

func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("persist: %w", err)
	}
	return nil
}

// loadPersisted activates the bundle kept in PersistDir, verified with the
// configured key as a download is, and gives the downloader its ETag so an
// unchanged server answers 304. A missing file is no error; a bad one is
// logged and recorded, and the engine stays without policy.
func (s *bundleSource) loadPersisted() {
	if s.cfg.PersistDir == "" {
		return
	}
	path := filepath.Join(s.cfg.PersistDir, persistBundleFile)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	now := time.Now()
	if err != nil {
		s.fail(now, BundleStageVerify, "", fmt.Errorf("persisted bundle: %w", err))
		return
	}
	defer f.Close()
	raw, err := readBundleCapped(f, MaxBundleSize)
	if err != nil {
		s.fail(now, BundleStageVerify, "", fmt.Errorf("persisted bundle %s: %w", path, err))
		return
	}
	b, err := bundle.NewCustomReader(bundle.NewTarballLoaderWithBaseURL(bytes.NewReader(raw), "")).
		WithBundleVerificationConfig(s.bvc).
		WithSizeLimitBytes(MaxBundleFileSize).
		WithBundlePersistence(true).
		WithRegoVersion(ast.RegoV1).
		WithProcessAnnotations(true).
		Read()
	if err != nil {
		s.fail(now, BundleStageVerify, "", fmt.Errorf("persisted bundle %s: %w", path, err))
		return
	}
	etag, _ := os.ReadFile(filepath.Join(s.cfg.PersistDir, persistETagFile))
	c, err := contentOf(&b, nil, string(etag))
	if err != nil {
		s.fail(now, BundleStageVerify, "", fmt.Errorf("persisted bundle %s: %w", path, err))
		return
	}
	if err := s.activate(context.Background(), c, true); err != nil {
		return
	}
	s.dl.SetCache(c.etag)
}
