//go:build !airlock_front

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
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/daemon"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/sandboxd"
)

func newServeCmd() *cobra.Command {
	var cfgPath, socket, runDir string
	var drain time.Duration
	var user bool
	cmd := &cobra.Command{
		Use:   "serve --config airlock.yaml",
		Short: "Run the gateway, DNS filter and executor as a daemon with an HTTP+JSON API on a unix socket",
		Long: `serve keeps one airlock running: sandboxes are created, used and deleted
(/v1/sandboxes), commands run once (POST /v1/run) and existing namespaces
attached (POST /v1/attach) through the API on a unix socket (api.socket, never
reachable from a sandbox). The socket is mode 0660 owned by api.group (default
airlock): its members call the API as themselves and see only their own
sandboxes; with api.group "" it is 0600, root only. The API is described by
GET /v1/openapi.json. Metrics are served on metrics.listen on the host. SIGHUP
reloads the policy; a failing reload keeps the old one. On SIGINT or SIGTERM
new sandboxes are refused, running execs get --drain-timeout to finish, then
every sandbox is killed and removed; attached namespaces are left closed (no
way out) and re-attached by the next serve with the same --run-dir. The run
directory is locked for serve's life: a second serve on it exits (2) naming the
first's pid and touches nothing there. GET /v1/health answers 503 with each
part's status while one is failing (state dir, audit, policy, bundle, pool).

Every audit record carries audit.node ($NODE_NAME, else the host name). The
sinks of audit.export ship the log as it grows; a jsonl sink with endpoint -
writes it to stdout (the operational log is on stderr), the per-node stream a
cluster's log collector picks up.

With --user, serve is one user's own daemon, run without root: its socket is
$XDG_RUNTIME_DIR/airlock/airlock.sock (else /run/user/UID/airlock/), mode 0600
in a directory that must be the user's and writable by nobody else, and only
that uid may call it (the kernel's peer credentials are checked, root's too);
its run directory and audit log are under $XDG_STATE_HOME/airlock (else
~/.local/state/airlock), its config is $XDG_CONFIG_HOME/airlock/airlock.yaml
(else ~/.config/airlock/) when that exists, its CA beside it, and its metrics
on a free loopback port. The same API, clients and warm pool; its sandboxes are
rootless (airlock run --help). Clients that are not root find the socket by the
same rule. What each mode needs from the
host: airlock doctor.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var dirs *config.UserDirs
			if user {
				d, err := userServeDirs()
				if err != nil {
					return err
				}
				dirs = &d
				if cfgPath == "" {
					if _, err := os.Stat(d.ConfigFile()); err == nil {
						cfgPath = d.ConfigFile()
					}
				}
				if !cmd.Flags().Changed("run-dir") {
					runDir = d.RunDir()
				}
			}
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			if dirs != nil {
				cfg.ApplyUser(*dirs)
			}
			if socket != "" {
				cfg.API.Socket = socket
			}
			return runServe(cmd, cfg, cfgPath, runDir, drain, dirs)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "airlock.yaml (default: built-in defaults)")
	cmd.Flags().StringVar(&socket, "socket", "", "API unix socket (overrides api.socket)")
	cmd.Flags().StringVar(&runDir, "run-dir", filepath.Join(daemon.DefaultRunDir, "serve"), "state kept across restarts (namespaces to re-attach)")
	cmd.Flags().DurationVar(&drain, "drain-timeout", 30*time.Second, "how long running execs may go on after SIGTERM before they are killed")
	cmd.Flags().BoolVar(&user, "user", false, "run as your own daemon, without root: socket, state, audit and config in your XDG directories, only you may connect")
	return cmd
}

// userServeDirs resolves the per-user daemon's directories for this
// process's user and creates the state directory (0700). Root is refused:
// its daemon is the system one.
func userServeDirs() (config.UserDirs, error) {
	uid := os.Getuid()
	if uid == 0 || os.Geteuid() == 0 {
		return config.UserDirs{}, &exitError{Code: 2, Msg: "serve --user: is for a user other than root; root runs `airlock serve`"}
	}
	home := "" // $HOME first; the password database's when it is unset
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		home = u.HomeDir
	}
	d, err := config.ResolveUserDirs(os.Getenv, uid, home)
	if err != nil {
		return config.UserDirs{}, &exitError{Code: 2, Msg: "serve --user: " + err.Error()}
	}
	for _, dir := range []string{d.State, filepath.Join(d.State, "audit")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return config.UserDirs{}, &exitError{Code: 2, Msg: "serve --user: state dir: " + err.Error()}
		}
		if err := daemon.CheckUserDir(dir, uid); err != nil {
			return config.UserDirs{}, &exitError{Code: 2, Msg: "serve --user: state dir: " + err.Error()}
		}
	}
	return d, nil
}

// exportStopWait bounds how long a stopping serve waits for the audit
// export's sends in flight.
const exportStopWait = 15 * time.Second

func runServe(cmd *cobra.Command, cfg config.Config, cfgPath, runDir string, drain time.Duration, user *config.UserDirs) error {
	owner := 0
	if user != nil {
		owner = user.UID
	} else if os.Geteuid() != 0 {
		return &exitError{Code: 2, Msg: "serve: needs root; `airlock serve --user` runs a daemon of your own without it (airlock doctor says what it needs)"}
	}
	if user != nil {
		// Refused before anything is built: the socket's directory's parent
		// must be the user's alone (ListenUserAPI checks it again).
		if err := daemon.CheckUserDir(filepath.Dir(filepath.Dir(cfg.API.Socket)), owner); err != nil {
			return &exitError{Code: 2, Msg: "serve --user: api.socket: " + err.Error()}
		}
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	// The API's connection caps are derived from the descriptor limit.
	if _, err := daemon.RaiseNOFILE(); err != nil {
		logger.Warn("descriptor limit", oplog.ErrorKey, err)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := daemon.Options{Config: cfg, ConfigPath: cfgPath, RunDir: runDir,
		EphemeralCA: true, Recover: netns.RecoverReattach, Pool: true, Approvals: true, Logger: logger, Owner: owner}
	if user != nil {
		// Sandboxes are rootless ones, their islands built by their own
		// inits (the warm pool's ahead of the creates).
		if err := sandboxd.CheckUserNamespaces("/proc/sys"); err != nil {
			return &exitError{Code: 2, Msg: fmt.Sprintf("serve --user: %v (airlock doctor --mode user-daemon says what to change)", err)}
		}
		r, err := rootlessMode(nil)
		if err != nil {
			return err
		}
		missing := rootlessCgroup(r)
		// As airlock run: what the delegation lacks is not bounded (the
		// notice says so), not a reason to refuse to start.
		opts.Rootless, opts.Executor = r, &sandboxd.Config{AllowMissingControllers: missing}
		rootlessNotice(cmd.ErrOrStderr(), r, missing)
	}
	d, err := daemon.New(ctx, opts)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	defer d.Close()
	// Audit export only reads the log's files; it runs until serve returns.
	// Its stdout sink is the audit stream a cluster's log collector picks up;
	// the operational log goes to stderr.
	node, err := daemon.AuditNode(cfg)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	exportReg, stopExport, err := startAuditExport(context.Background(), cfg, cmd.OutOrStdout(), node, logger)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	// A send in flight finishes (a sink's own timeout bounds it) unless it
	// writes to a stdout nobody reads: that one is left to the exit.
	defer stopExport(exportStopWait)

	var apiLn net.Listener
	if user != nil {
		apiLn, err = daemon.ListenUserAPI(cfg.API.Socket, owner)
	} else {
		apiLn, err = daemon.ListenAPI(cfg.API.Socket, cfg.API.Group)
	}
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	metricsLn, err := net.Listen("tcp", cfg.Metrics.Listen)
	if err != nil {
		apiLn.Close()
		return &exitError{Code: 2, Msg: fmt.Sprintf("metrics.listen: %v", err)}
	}
	// Requests in flight end with the daemon: their context is cancelled once
	// the drain is over, which kills what they still run.
	baseCtx, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	api := d.APIServer(baseCtx)
	metrics := &http.Server{Handler: d.MetricsHandler(exportReg), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- api.Serve(apiLn) }()
	go func() { errc <- metrics.Serve(metricsLn) }()
	logger.Info("serving", "socket", cfg.API.Socket, "group", cfg.API.Group, "metrics", metricsLn.Addr().String(), "iptables", d.Backend())

	serveErr := serveUntilStopped(ctx, d, errc, logger)
	// Stop: no new sandbox, running execs drain, then every sandbox ends.
	dctx, dcancel := context.WithTimeout(context.Background(), drain)
	if err := d.Shutdown(dctx); err != nil {
		logger.Warn("drain", oplog.ErrorKey, err)
	}
	dcancel()
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

// serveUntilStopped reloads the policy on SIGHUP until ctx ends (SIGINT,
// SIGTERM) or a server fails.
func serveUntilStopped(ctx context.Context, d *daemon.Daemon, errc <-chan error, logger *slog.Logger) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-hup:
			if err := d.Engine().Reload(ctx); err != nil {
				logger.Error("policy reload failed; the previous policy stays in force", oplog.ErrorKey, err)
			} else {
				logger.Info("policy reloaded", oplog.PolicyRevKey, d.Engine().Rev())
			}
		case err := <-errc:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}
