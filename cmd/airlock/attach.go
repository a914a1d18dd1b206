//go:build !airlock_front

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/daemon"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
)

// attachOptions are the flags of `airlock attach`.
type attachOptions struct {
	netns     string
	id        string
	labels    []string
	config    string
	policyDir string
	allow     []string
	audit     string
	upstreams []string
	stateDir  string
	inbound   string
	ports     []int
}

// attachReadyHook, when set (tests only), is called once the namespace is attached.
var attachReadyHook func(*netns.Sandbox)

func newAttachCmd() *cobra.Command {
	var o attachOptions
	cmd := &cobra.Command{
		Use:   "attach --netns PATH --id ID",
		Short: "Give an existing network namespace (a container's or a VM's) airlock's listeners and rules until interrupted",
		Long: `attach runs the gateway and DNS filter for one existing network namespace,
such as /proc/PID/ns/net of a "docker run --network none" container or the
namespace holding a Firecracker tap device. TCP and DNS leaving it, or arriving on
its tap/veth interfaces, go through policy; everything else is dropped and audited.
With --inbound accept, what arrives is traffic from the network instead: new TCP
connections to the namespace's own addresses on the --inbound-port ports (every
TCP port when none is given) are let in and only their replies leave.
On SIGINT or SIGTERM the namespace's rules and sysctls are put back as they were.
The processes in the namespace must not hold CAP_NET_ADMIN or CAP_NET_RAW there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runAttach(ctx, cmd, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.netns, "netns", "", "network namespace to attach (/var/run/netns/NAME or /proc/PID/ns/net)")
	f.StringVar(&o.id, "id", "", "sandbox id policy and audit see")
	f.StringArrayVar(&o.labels, "label", nil, "sandbox label KEY=VALUE (repeatable)")
	f.StringVar(&o.config, "config", "", "airlock.yaml (default: built-in defaults)")
	f.StringVar(&o.policyDir, "policy", "", "policy directory (overrides policy.dir)")
	f.StringArrayVar(&o.allow, "allow", nil, "allow HOST (or *.x / **.x) (repeatable, adds to policy.allow)")
	f.StringVar(&o.audit, "audit", "", "audit log file (overrides audit.file)")
	f.StringArrayVar(&o.upstreams, "dns-upstream", nil, "DNS upstream IP:PORT (repeatable, overrides dns.upstreams)")
	f.StringVar(&o.stateDir, "state-dir", netns.DefaultStateDir, "where attach state is kept for crash recovery")
	f.StringVar(&o.inbound, "inbound", string(netns.InboundCapture), "what arrives on the namespace's interfaces: capture (a VM's egress, to policy) or accept (connections from the network)")
	f.IntSliceVar(&o.ports, "inbound-port", nil, "TCP port --inbound accept lets connections in on (repeatable; none: every port)")
	return cmd
}

func runAttach(ctx context.Context, cmd *cobra.Command, o attachOptions) error {
	usage := func(msg string) error { return &exitError{Code: 2, Msg: msg} }
	if o.netns == "" || o.id == "" {
		return usage("--netns and --id are required")
	}
	if err := netns.ValidateID(o.id); err != nil {
		return usage(err.Error())
	}
	labels, err := parseLabels(o.labels)
	if err != nil {
		return usage(err.Error())
	}
	inbound := netns.Inbound{Mode: netns.InboundMode(o.inbound), Ports: o.ports}
	if err := inbound.Validate(); err != nil {
		return usage(strings.NewReplacer("inbound.mode", "--inbound", "inbound.ports", "--inbound-port").Replace(err.Error()))
	}
	cfg, err := config.Load(o.config)
	if err != nil {
		return usage(err.Error())
	}
	if o.policyDir != "" {
		cfg.Policy.Dir = o.policyDir
	}
	cfg.Policy.Allow = append(cfg.Policy.Allow, o.allow...)
	if o.audit != "" {
		cfg.Audit.File = o.audit
	}
	if len(o.upstreams) > 0 {
		cfg.DNS.Upstreams = o.upstreams
	}
	if err := cfg.Validate(); err != nil {
		return usage(err.Error())
	}
	if len(cfg.DNS.Upstreams) == 0 {
		return usage("dns.upstreams (or --dns-upstream) is required")
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	d, err := daemon.New(ctx, daemon.Options{
		Config:     cfg,
		ConfigPath: o.config,
		RunDir:     filepath.Join(o.stateDir, o.id),
		Recover:    netns.RecoverReattach,
		NoExecutor: true,
		Logger:     logger,
	})
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	defer d.Close()
	sb, err := d.Attach(ctx, policy.Sandbox{ID: o.id, Labels: labels}, o.netns, inbound)
	if err != nil {
		return &exitError{Code: 1, Msg: err.Error()}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "attached %s as sandbox %s (iptables %s, inbound %s); interrupt to detach\n", o.netns, sb.ID, d.Backend(), sb.Inbound)
	if attachReadyHook != nil {
		attachReadyHook(sb)
	}
	<-ctx.Done()
	// Detach with a fresh context: ctx is already cancelled by the signal.
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Detach(dctx, sb.ID); err != nil {
		return &exitError{Code: 1, Msg: err.Error()}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "detached %s\n", o.netns)
	return nil
}
