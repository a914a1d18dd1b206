package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/gateway"
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
	return cmd
}

// parseLabels turns KEY=VALUE flags into a map; keys must be non-empty and unique.
func parseLabels(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--label %q: want KEY=VALUE", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--label %q: key %q given twice", kv, k)
		}
		out[k] = v
	}
	return out, nil
}

func parsePrefixes(field string, ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%s %q: not a CIDR or address", field, s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
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
	allowCIDRs, err := parsePrefixes("upstream.allow_cidrs", cfg.Upstream.AllowCIDRs)
	if err != nil {
		return usage(err.Error())
	}

	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	eng, err := policy.New(policy.Config{
		Dir:        cfg.Policy.Dir,
		Mode:       policy.Mode(cfg.Policy.Mode),
		Presets:    cfg.Policy.Presets,
		AllowHosts: cfg.Policy.Allow,
	}, logger)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	defer eng.Close()
	aw, err := audit.New(audit.Config{File: cfg.Audit.File, MaxSize: audit.Size(cfg.Audit.MaxSize), SigningKeyFile: cfg.Audit.SigningKey}, logger)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	defer aw.Close()
	dns, err := dnsfilter.New(dnsfilter.Config{
		Upstreams:  cfg.DNS.Upstreams,
		MinTTL:     time.Duration(cfg.DNS.MinTTL),
		MaxTTL:     time.Duration(cfg.DNS.MaxTTL),
		AllowCIDRs: cfg.Upstream.AllowCIDRs,
	}, eng, aw, logger)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	gwCfg := gateway.Config{AllowCIDRs: allowCIDRs, UpstreamCAFile: cfg.Upstream.CAFile}
	if _, err := os.Stat(cfg.CA.Cert); err == nil {
		gwCfg.CACertFile, gwCfg.CAKeyFile = cfg.CA.Cert, cfg.CA.Key
	} else {
		logger.Warn("no interception CA: requests policy wants intercepted are denied", "ca_cert", cfg.CA.Cert)
	}
	gw, err := gateway.New(gwCfg, eng, aw, dns.Resolver(), logger)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		gw.Shutdown(sctx)
		dns.Shutdown(sctx)
	}()

	m, err := netns.New(netns.Config{StateDir: o.stateDir}, gatewayServer{gw: gw, dns: dns}, aw, logger)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	defer m.Close()
	sb, err := m.Attach(ctx, policy.Sandbox{ID: o.id, Labels: labels}, o.netns)
	if err != nil {
		return &exitError{Code: 1, Msg: err.Error()}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "attached %s as sandbox %s (iptables %s); interrupt to detach\n", o.netns, sb.ID, m.Backend())
	if attachReadyHook != nil {
		attachReadyHook(sb)
	}
	<-ctx.Done()
	// Detach with a fresh context: ctx is already cancelled by the signal.
	dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Detach(dctx, sb.ID); err != nil {
		return &exitError{Code: 1, Msg: err.Error()}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "detached %s\n", o.netns)
	return nil
}

// gatewayServer serves a sandbox's listeners with the gateway (explicit and
// transparent) and the DNS filter (UDP and TCP): the netns.Server glue.
type gatewayServer struct {
	gw  *gateway.Gateway
	dns *dnsfilter.Filter
}

var _ netns.Server = gatewayServer{}

func (s gatewayServer) Serve(sb policy.Sandbox, own []netip.Addr, ls netns.Listeners) error {
	if err := s.dns.ServeSandbox(sb, own, ls.DNSUDP, ls.DNSTCP); err != nil {
		return err
	}
	if err := s.gw.ServeSandbox(sb, ls.Explicit, ls.Transparent); err != nil {
		s.dns.StopSandbox(sb.ID)
		return err
	}
	return nil
}

func (s gatewayServer) Stop(id string) {
	s.gw.StopSandbox(id)
	s.dns.StopSandbox(id)
}
