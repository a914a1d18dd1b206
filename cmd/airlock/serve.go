package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/daemon"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/oplog"
)

func newServeCmd() *cobra.Command {
	var cfgPath, socket, runDir string
	cmd := &cobra.Command{
		Use:   "serve --config airlock.yaml",
		Short: "Run the gateway, DNS filter and executor as a daemon with an HTTP+JSON API on a unix socket",
		Long: `serve keeps one airlock running: sandboxes are started (POST /v1/run) and
existing namespaces attached (POST /v1/attach) through the API on a unix socket
(api.socket, mode 0600, never reachable from a sandbox). Metrics are served on
metrics.listen on the host. SIGHUP reloads the policy; a failing reload keeps the
old one. On SIGINT or SIGTERM attached namespaces are left closed (no way out)
and re-attached by the next serve with the same --run-dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			if socket != "" {
				cfg.API.Socket = socket
			}
			return runServe(cmd, cfg, cfgPath, runDir)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "airlock.yaml (default: built-in defaults)")
	cmd.Flags().StringVar(&socket, "socket", "", "API unix socket (overrides api.socket)")
	cmd.Flags().StringVar(&runDir, "run-dir", filepath.Join(daemon.DefaultRunDir, "serve"), "state kept across restarts (namespaces to re-attach)")
	return cmd
}

func runServe(cmd *cobra.Command, cfg config.Config, cfgPath, runDir string) error {
	if os.Geteuid() != 0 {
		return &exitError{Code: 2, Msg: "serve: needs root"}
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := daemon.New(ctx, daemon.Options{Config: cfg, ConfigPath: cfgPath, RunDir: runDir,
		EphemeralCA: true, Recover: netns.RecoverReattach, Logger: logger})
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	defer d.Close()

	apiLn, err := listenUnix(cfg.API.Socket)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	metricsLn, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		apiLn.Close()
		return &exitError{Code: 2, Msg: fmt.Sprintf("metrics.listen: %v", err)}
	}
	// Requests in flight (a long /v1/run) end with the daemon: their context is
	// cancelled, which kills their sandboxes and tears their namespaces down.
	baseCtx, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	api := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return baseCtx }}
	metrics := &http.Server{Handler: d.MetricsHandler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- api.Serve(apiLn) }()
	go func() { errc <- metrics.Serve(metricsLn) }()
	logger.Info("serving", "socket", cfg.API.Socket, "metrics", metricsLn.Addr().String(), "iptables", d.Backend())

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var serveErr error
loop:
	for {
		select {
		case <-hup:
			if err := d.Engine().Reload(ctx); err != nil {
				logger.Error("policy reload failed; the previous policy stays in force", oplog.ErrorKey, err)
			} else {
				logger.Info("policy reloaded", oplog.PolicyRevKey, d.Engine().Rev())
			}
		case err := <-errc:
			serveErr = err
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	cancelBase()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = api.Shutdown(sctx)
	_ = metrics.Shutdown(sctx)
	_ = os.Remove(cfg.API.Socket)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return &exitError{Code: 1, Msg: serveErr.Error()}
	}
	return nil
}

// listenUnix listens on a unix socket only root can use, replacing a stale
// socket file but never a live one.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("api.socket %s: another airlock is serving it", path)
	}
	_ = os.Remove(path)
	// The directory is 0700 and the socket 0600 after the chmod; before it the
	// umask leaves it without group or other write, which connect needs.
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("api.socket: %w", err)
	}
	return ln, nil
}
