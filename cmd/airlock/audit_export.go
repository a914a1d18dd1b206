//go:build !airlock_front

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/export"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/oplog"
)

// auditExportFlags are `airlock audit export`'s flags.
type auditExportFlags struct {
	cfg     export.Config
	follow  bool
	rotated bool
}

func newAuditExportCmd() *cobra.Command {
	var fl auditExportFlags
	cmd := &cobra.Command{
		Use:   "export --format ocsf|otlp|syslog|jsonl [--to URL] [--follow] FILE...",
		Short: "Ship audit records to a SIEM or collector as OCSF, OTLP logs, RFC 5424 syslog or JSONL",
		Long: `export sends the records of FILE... (oldest first, as one chain; --rotated
expands each FILE to its rotated siblings then FILE) to --to, or prints them.
With --follow, FILE is the live audit file: its rotated siblings are shipped
first, then appended records as they come, across rotations, until
interrupted.

Formats and where they go (--to):
  jsonl   the lines as written; stdout, or a file appended to and fsynced.
          A collected copy verifies with ` + "`airlock audit verify`" + `.
  ocsf    OCSF 1.x events (HTTP Activity 4002, Network Activity 4001, DNS
          Activity 4003, Base Event 0), one JSON object a line; stdout or a file.
  otlp    OpenTelemetry logs: http://host:4318 or https:// (OTLP/HTTP
          protobuf, path /v1/logs unless given), grpc://host:4317 (plaintext)
          or grpcs:// (TLS). Body: the record's line; attributes airlock.*.
  syslog  RFC 5424 over tcp://host:port (RFC 6587 octet counting) or
          tls://host:port (RFC 5425); structured data airlock@32473.
Every event carries the record's seq, prev and its own hash, so the copy a
collector keeps can be checked as the same chain.

--state FILE keeps the last seq the collector acknowledged (written atomically
after each batch): a later run resumes after it, so nothing is sent twice or
skipped. A collector that is down is retried with exponential back-off; without
--follow, --max-attempts bounds the tries of a batch (exit 1). Records that
retention deleted before they were shipped are sent as one export_gap marker
naming the seqs, never skipped silently.

Examples:
  airlock audit export --format jsonl --rotated /var/log/airlock/audit.jsonl > copy.jsonl
  airlock audit export --format ocsf /var/log/airlock/audit.jsonl.1 /var/log/airlock/audit.jsonl
  airlock audit export --format otlp --to https://otel.corp:4318 --ca-file corp-ca.pem --follow --state otlp.state /var/log/airlock/audit.jsonl
  airlock audit export --format syslog --to tls://siem.corp:6514 --ca-file corp-ca.pem --follow /var/log/airlock/audit.jsonl

airlock serve ships continuously with audit.export in its config.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runAuditExport(cmd, fl, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.cfg.Format, "format", "", "ocsf, otlp, syslog or jsonl (required)")
	f.StringVar(&fl.cfg.Endpoint, "to", "", "where to send: a file (jsonl, ocsf; default stdout), http(s):// or grpc(s):// (otlp), tcp:// or tls:// (syslog)")
	f.BoolVarP(&fl.follow, "follow", "f", false, "FILE is the live audit file: ship its chain, then appended records, until interrupted")
	f.BoolVar(&fl.rotated, "rotated", false, "expand each FILE to its rotated siblings (FILE.1, FILE.2, ...) followed by FILE")
	f.StringVar(&fl.cfg.StateFile, "state", "", "keep the last acknowledged seq here and resume after it")
	f.StringVar(&fl.cfg.Name, "name", "", "the sink's name in the state file (default: the format)")
	f.StringVar(&fl.cfg.TLS.CAFile, "ca-file", "", "PEM CA bundle to trust for https, grpcs and tls endpoints (default: the system's)")
	f.StringVar(&fl.cfg.TLS.ServerName, "server-name", "", "name to check in the collector's certificate (default: the endpoint's host)")
	f.StringVar(&fl.cfg.TLS.CertFile, "cert-file", "", "client certificate (PEM) for collectors that require one")
	f.StringVar(&fl.cfg.TLS.KeyFile, "key-file", "", "client certificate's key (PEM)")
	f.IntVar(&fl.cfg.BatchSize, "batch-size", export.DefaultBatchSize, "most records in one request")
	f.IntVar(&fl.cfg.MaxAttempts, "max-attempts", 5, "without --follow, tries of a batch before giving up (0: until interrupted)")
	return cmd
}

func runAuditExport(cmd *cobra.Command, fl auditExportFlags, args []string) error {
	if fl.cfg.Format == "" {
		return &exitError{Code: 2, Msg: "--format is required: ocsf, otlp, syslog or jsonl"}
	}
	src := export.ReadOptions{Files: args}
	switch {
	case fl.follow && (len(args) != 1 || fl.rotated):
		return &exitError{Code: 2, Msg: "--follow takes one FILE, the live audit file (its rotated siblings are included)"}
	case fl.follow:
		src = export.ReadOptions{Live: args[0], Follow: true}
		fl.cfg.MaxAttempts = 0
	case fl.rotated:
		src.Files = nil
		for _, a := range args {
			chain, err := audit.ChainFiles(a)
			if err != nil {
				return &exitError{Code: 2, Msg: err.Error()}
			}
			if len(chain) == 0 {
				return &exitError{Code: 2, Msg: fmt.Sprintf("%s: no such audit file or rotated siblings", a)}
			}
			src.Files = append(src.Files, chain...)
		}
	}
	for _, p := range src.Files {
		if _, err := os.Stat(p); err != nil {
			return &exitError{Code: 2, Msg: err.Error()}
		}
	}
	fl.cfg.Version = version
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sink, err := export.NewSink(ctx, fl.cfg, cmd.OutOrStdout())
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	defer sink.Close()
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := export.New(fl.cfg, src, sink, logger)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	if err := s.Run(ctx); err != nil {
		return &exitError{Code: 1, Msg: err.Error()}
	}
	if st := s.Stats(); st.GapRecords > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d records were gone before they were shipped (an export_gap marker was sent)\n", st.GapRecords)
	}
	return nil
}

// startAuditExport starts a Shipper for every sink of audit.export, each
// following the live audit file from its own state file, and returns their
// metrics and a stop function that waits (a bounded time) for them. They only read the log's
// files: a collector that is slow or down (or a stdout nobody reads) never
// holds up the gateway; the shipper lags instead
// (airlock_audit_export_lag_records). A jsonl or ocsf sink with endpoint "-"
// writes to stdout; syslog's HOSTNAME is node.
func startAuditExport(ctx context.Context, cfg config.Config, stdout io.Writer, node string, logger *slog.Logger) (*prometheus.Registry, func(wait time.Duration), error) {
	ctx, cancel := context.WithCancel(ctx)
	reg := prometheus.NewRegistry()
	var shippers []*export.Shipper
	var sinks []export.Sink
	done := make(chan struct{}, len(cfg.Audit.Export))
	// stop waits up to wait for the shippers to finish their sends; one
	// still writing after it (a stdout nobody reads) is left to the process's
	// exit, its sink open.
	stop := func(wait time.Duration) {
		cancel()
		t := time.NewTimer(wait)
		defer t.Stop()
		for n := range shippers {
			select {
			case <-done:
			case <-t.C:
				logger.Warn("audit export: sinks still sending at stop; leaving them", "sinks", len(shippers)-n)
				return
			}
		}
		for _, s := range sinks {
			s.Close()
		}
	}
	for i, sc := range cfg.Audit.Export {
		ec := exportConfig(sc, cfg.Audit.File)
		ec.Hostname = node
		sink, err := export.NewSink(ctx, ec, stdout)
		if err == nil {
			var s *export.Shipper
			if s, err = export.New(ec, export.ReadOptions{Live: cfg.Audit.File, Follow: true}, sink, logger); err == nil {
				sinks, shippers = append(sinks, sink), append(shippers, s)
				reg.MustRegister(s)
				go func() {
					defer func() { done <- struct{}{} }()
					if err := s.Run(ctx); err != nil {
						logger.Error("audit export stopped", "sink", ec.Name, oplog.ErrorKey, err)
					}
				}()
				continue
			}
			sink.Close()
		}
		stop(time.Minute)
		return nil, nil, fmt.Errorf("audit.export[%d]: %w", i, err)
	}
	return reg, stop, nil
}

// exportConfig maps one audit.export entry onto export.Config.
func exportConfig(sc config.AuditExport, auditFile string) export.Config {
	ec := export.Config{
		Name: sc.Name, Format: sc.Format, Endpoint: sc.Endpoint, StateFile: sc.StateFile,
		TLS:       export.TLS{CAFile: sc.TLS.CAFile, ServerName: sc.TLS.ServerName, CertFile: sc.TLS.CertFile, KeyFile: sc.TLS.KeyFile},
		BatchSize: sc.BatchSize, FlushInterval: time.Duration(sc.FlushInterval), BackoffMin: time.Duration(sc.BackoffMin), BackoffMax: time.Duration(sc.BackoffMax),
		Timeout: time.Duration(sc.Timeout), Version: version,
	}
	if ec.Name == "" {
		ec.Name = ec.Format
	}
	if ec.StateFile == "" {
		ec.StateFile = export.DefaultStateFile(auditFile, ec.Name)
	}
	return ec
}
