package policy

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/airlock-dev/airlock/oplog"
)

// watch reloads the policy when a file under cfg.Dir changes, after
// cfg.ReloadDebounce of quiet. Close stops it.
func (e *Engine) watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("policy: watch: %w", err)
	}
	add := func(root string) error {
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != root && strings.HasPrefix(d.Name(), ".") {
					return filepath.SkipDir
				}
				return w.Add(p)
			}
			return nil
		})
	}
	if err := add(e.cfg.Dir); err != nil {
		w.Close()
		return fmt.Errorf("policy: watch: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	e.stopMu.Lock()
	e.stop = func() {
		cancel()
		w.Close()
		<-done
	}
	e.stopMu.Unlock()
	go func() {
		defer close(done)
		var timer *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				if timer != nil {
					timer.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if ev.Has(fsnotify.Create) {
					_ = add(ev.Name) // a new subdirectory; a plain file fails harmlessly
				}
				if timer == nil {
					timer = time.NewTimer(e.cfg.ReloadDebounce)
				} else {
					timer.Reset(e.cfg.ReloadDebounce)
				}
				fire = timer.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				e.log.Error("policy watch error", oplog.ErrorKey, err)
			case <-fire:
				fire = nil
				_ = e.Reload(ctx) // Reload logs its own failure
			}
		}
	}()
	return nil
}

// Close stops the file watcher, if any. Decide keeps working after Close.
func (e *Engine) Close() error {
	e.stopMu.Lock()
	stop := e.stop
	e.stop = nil
	e.stopMu.Unlock()
	if stop != nil {
		stop()
	}
	return nil
}
