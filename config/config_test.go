package config

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string
		check   func(t *testing.T, c Config)
	}{
		{name: "empty is defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.Policy.Mode != "enforce" || c.Limits.Memory != 512<<20 || time.Duration(c.Limits.Timeout) != 10*time.Minute {
				t.Fatalf("got %+v, want defaults", c)
			}
		}},
		{name: "design example", yaml: `
policy: {dir: ./policies, mode: enforce}
dns: {upstreams: ["1.1.1.1:53"], min_ttl: 30s, max_ttl: 1h}
upstream: {allow_cidrs: [], ca_file: ""}
audit: {file: /var/log/airlock/audit.jsonl, max_size: 100MB}
ca: {cert: /etc/airlock/ca.pem, key: /etc/airlock/ca.key}
secrets: {file: /etc/airlock/secrets.yaml}
limits: {memory: 512M, cpus: 1, pids: 256, timeout: 10m, tmp_size: 256M}
`, check: func(t *testing.T, c Config) {
			if c.Audit.MaxSize != 100<<20 || c.Limits.TmpSize != 256<<20 || c.DNS.Upstreams[0] != "1.1.1.1:53" {
				t.Fatalf("got %+v", c)
			}
		}},
		{name: "audit node", yaml: "audit: {node: ip-10-0-1-17.eu-west-1.compute.internal}", check: func(t *testing.T, c Config) {
			if c.Audit.Node != "ip-10-0-1-17.eu-west-1.compute.internal" {
				t.Fatalf("got node %q", c.Audit.Node)
			}
		}},
		{name: "audit node with a space", yaml: "audit: {node: 'node a'}", wantErr: `audit.node: "node a" is not a node name`},
		{name: "audit export to stdout", yaml: "audit: {export: [{name: stdout, format: jsonl, endpoint: '-'}]}", check: func(t *testing.T, c Config) {
			if len(c.Audit.Export) != 1 || c.Audit.Export[0].Endpoint != "-" {
				t.Fatalf("got %+v", c.Audit.Export)
			}
		}},
		{name: "two sinks on stdout", yaml: "audit: {export: [{format: jsonl, endpoint: '-'}, {format: ocsf, endpoint: '-'}]}", wantErr: "audit.export[1].endpoint: - (stdout) is used by another sink"},
		{name: "otlp to stdout", yaml: "audit: {export: [{format: otlp, endpoint: '-'}]}", wantErr: "audit.export[0].endpoint: - (stdout) is for jsonl and ocsf"},
		{name: "unknown field", yaml: "policy: {dri: x}", wantErr: "field dri not found"},
		{name: "unknown section", yaml: "polcy: {}", wantErr: "field polcy not found"},
		// Upstream TLS is always verified: there is no key to turn it off.
		{name: "no insecure upstream tls", yaml: "upstream: {insecure_skip_verify: true}", wantErr: "field insecure_skip_verify not found"},
		{name: "bad mode", yaml: "policy: {mode: audit}", wantErr: "policy.mode"},
		{name: "eval timeout", yaml: "policy: {eval_timeout: 2s}", check: func(t *testing.T, c Config) {
			if time.Duration(c.Policy.EvalTimeout) != 2*time.Second {
				t.Fatalf("got %v, want 2s", c.Policy.EvalTimeout)
			}
		}},
		{name: "eval timeout too long", yaml: "policy: {eval_timeout: 1m}", wantErr: "policy.eval_timeout: 1m0s is not between"},
		{name: "eval timeout negative", yaml: "policy: {eval_timeout: -1s}", wantErr: `duration "-1s": negative`},
		{name: "bad size", yaml: "limits: {memory: 12Q}", wantErr: `unknown unit "Q"`},
		{name: "bad duration", yaml: "limits: {timeout: soon}", wantErr: "want e.g. 30s"},
		{name: "bad cidr", yaml: "upstream: {allow_cidrs: [10.0.0.0/33]}", wantErr: "upstream.allow_cidrs[0]"},
		{name: "parent proxy", yaml: "upstream: {proxy: 'http://proxy.corp:3128', no_proxy: [internal.corp, '*.corp', .lan, 10.0.0.0/8, 192.0.2.1], proxy_auth_secret: corp-proxy}\nsecrets: {file: /etc/airlock/secrets.yaml}", check: func(t *testing.T, c Config) {
			if c.Upstream.Proxy != "http://proxy.corp:3128" || len(c.Upstream.NoProxy) != 5 || c.Upstream.ProxyAuthSecret != "corp-proxy" {
				t.Fatalf("got %+v", c.Upstream)
			}
		}},
		{name: "parent proxy with credentials", yaml: "upstream: {proxy: 'http://alice:pw@proxy.corp:3128'}", wantErr: "upstream.proxy: the URL carries credentials; put \"user:password\" in a secret of the secrets file"},
		{name: "parent proxy scheme", yaml: "upstream: {proxy: 'socks5://proxy.corp:1080'}", wantErr: "upstream.proxy: \"socks5://proxy.corp:1080\": scheme must be http or https"},
		{name: "parent proxy path", yaml: "upstream: {proxy: 'http://proxy.corp:3128/x'}", wantErr: "upstream.proxy: "},
		{name: "parent proxy no host", yaml: "upstream: {proxy: 'http://'}", wantErr: "upstream.proxy: "},
		{name: "no_proxy entry", yaml: "upstream: {proxy: 'http://p:3128', no_proxy: ['a b']}", wantErr: "upstream.no_proxy[0]"},
		{name: "no_proxy without proxy", yaml: "upstream: {no_proxy: [x.corp]}", wantErr: "upstream.no_proxy and upstream.proxy_auth_secret need upstream.proxy"},
		{name: "proxy secret without secrets file", yaml: "upstream: {proxy: 'http://p:3128', proxy_auth_secret: corp}", wantErr: "upstream.proxy_auth_secret"},
		{name: "upstream name", yaml: "dns: {upstreams: [dns.google:53]}", wantErr: "dns.upstreams[0]"},
		{name: "dot upstream", yaml: "dns: {upstreams: [\"tls://9.9.9.9:853#dns.quad9.net\"]}", check: func(t *testing.T, c Config) {}},
		{name: "dot without name", yaml: "dns: {upstreams: [\"tls://9.9.9.9:853\"]}", wantErr: "SERVERNAME"},
		{name: "dns limits", yaml: "dns: {rate_limit: 50, rate_burst: 100, block_flags: [rate_limited, high_entropy], audit_rate: 10}", check: func(t *testing.T, c Config) {
			if c.DNS.RateLimit != 50 || len(c.DNS.BlockFlags) != 2 || c.DNS.AuditRate != 10 {
				t.Fatalf("got %+v", c.DNS)
			}
		}},
		{name: "bad block flag", yaml: "dns: {block_flags: [loud]}", wantErr: "dns.block_flags[0]"},
		{name: "negative rate", yaml: "dns: {rate_limit: -1}", wantErr: "must not be negative"},
		{name: "ttl order", yaml: "dns: {min_ttl: 2h, max_ttl: 1h}", wantErr: "greater than dns.max_ttl"},
		{name: "tiny memory", yaml: "limits: {memory: 1K}", wantErr: "limits.memory"},
		{name: "bad env", yaml: "sandbox: {env: [NOEQUALS]}", wantErr: "sandbox.env[0]"},
		{name: "two documents", yaml: "policy: {}\n---\npolicy: {}\n", wantErr: "more than one"},
		{name: "nan cpus", yaml: "limits: {cpus: .nan}", wantErr: "limits.cpus"},
		{name: "infinite cpus", yaml: "limits: {cpus: .inf}", wantErr: "limits.cpus"},
		{name: "tiny cpus", yaml: "limits: {cpus: 0.001}", wantErr: "limits.cpus"},
		{name: "tiny tmp size", yaml: "limits: {tmp_size: 100}", wantErr: "limits.tmp_size"},
		{name: "new flows negative", yaml: "limits: {new_flows: -1}", wantErr: "limits.new_flows"},
		{name: "new flows too high", yaml: "limits: {new_flows: 100001}", wantErr: "limits.new_flows"},
		{name: "new flow burst too high", yaml: "limits: {new_flow_burst: 200000}", wantErr: "limits.new_flow_burst"},
		{name: "new flows raised", yaml: "limits: {new_flows: 20000, new_flow_burst: 10000}", check: func(t *testing.T, c Config) {
			if c.Limits.NewFlows != 20000 || c.Limits.NewFlowBurst != 10000 {
				t.Fatalf("got %+v", c.Limits)
			}
		}},
		{name: "audit overflow default", yaml: "", check: func(t *testing.T, c Config) {
			if c.Audit.Overflow != "block" {
				t.Fatalf("audit.overflow: got %q, want block", c.Audit.Overflow)
			}
		}},
		{name: "audit overflow deny", yaml: "audit: {overflow: deny}", check: func(t *testing.T, c Config) {
			if c.Audit.Overflow != "deny" {
				t.Fatalf("audit.overflow: got %q, want deny", c.Audit.Overflow)
			}
		}},
		{name: "bad audit overflow", yaml: "audit: {overflow: drop}", wantErr: "audit.overflow"},
		{name: "audit defaults", yaml: "", check: func(t *testing.T, c Config) {
			if c.Audit.MinFree.Of(1<<40) != 256<<20 || c.Audit.MaxFiles != 0 || c.Audit.MaxBytes != 0 || c.Audit.GatewayRate != 0 {
				t.Fatalf("got %+v, want min_free 256M, no retention, the audit package's budget", c.Audit)
			}
		}},
		{name: "audit retention and budget", yaml: "audit: {max_files: 10, max_bytes: 1G, gateway_rate: 50, gateway_burst: 100, min_free: 1%}", check: func(t *testing.T, c Config) {
			a := c.Audit
			if a.MaxFiles != 10 || a.MaxBytes != 1<<30 || a.GatewayRate != 50 || a.GatewayBurst != 100 || a.MinFree.Of(1000) != 10 {
				t.Fatalf("got %+v", a)
			}
		}},
		{name: "audit min_free off", yaml: "audit: {min_free: 0}", check: func(t *testing.T, c Config) {
			if got := c.Audit.MinFree.Of(1 << 40); got != 0 {
				t.Fatalf("min_free 0: got threshold %d, want 0 (off)", got)
			}
		}},
		{name: "audit min_free size", yaml: "audit: {min_free: 64M}", check: func(t *testing.T, c Config) {
			if got := c.Audit.MinFree.Of(1 << 40); got != 64<<20 {
				t.Fatalf("min_free 64M: got %d", got)
			}
		}},
		{name: "bad audit min_free", yaml: "audit: {min_free: 120%}", wantErr: "percentage between"},
		{name: "bad audit min_free unit", yaml: "audit: {min_free: lots}", wantErr: "free space"},
		{name: "negative audit max_files", yaml: "audit: {max_files: -1}", wantErr: "audit.max_files"},
		{name: "negative audit gateway_rate", yaml: "audit: {gateway_rate: -5}", wantErr: "audit.gateway_rate"},
		{name: "nan audit gateway_rate", yaml: "audit: {gateway_rate: .nan}", wantErr: "audit.gateway_rate"},
		{name: "negative audit gateway_burst", yaml: "audit: {gateway_burst: -1}", wantErr: "audit.gateway_burst"},
		{name: "tiny audit max_size", yaml: "audit: {max_size: 100}", wantErr: "audit.max_size"},
		{name: "audit export sinks", yaml: "audit: {export: [{format: otlp, endpoint: \"https://otel:4318\", tls: {ca_file: /ca.pem}, batch_size: 100, backoff_max: 30s}, {name: copy, format: jsonl, endpoint: /x/copy.jsonl}]}", check: func(t *testing.T, c Config) {
			e := c.Audit.Export
			if len(e) != 2 || e[0].TLS.CAFile != "/ca.pem" || e[0].BatchSize != 100 || time.Duration(e[0].BackoffMax) != 30*time.Second || e[1].Name != "copy" {
				t.Fatalf("got %+v", e)
			}
		}},
		{name: "bad audit export format", yaml: "audit: {export: [{format: cef, endpoint: x}]}", wantErr: "audit.export[0].format"},
		{name: "audit export without endpoint", yaml: "audit: {export: [{format: jsonl}]}", wantErr: "audit.export[0].endpoint"},
		{name: "audit export same name twice", yaml: "audit: {export: [{format: jsonl, endpoint: a}, {format: jsonl, endpoint: b}]}", wantErr: "audit.export[1].name"},
		{name: "audit export unknown key", yaml: "audit: {export: [{format: jsonl, endpoint: a, retries: 3}]}", wantErr: "retries"},
		{name: "daemon defaults", yaml: "", check: func(t *testing.T, c Config) {
			s := c.Sandbox
			if c.API.Group != "airlock" || s.PoolSize != 2 || time.Duration(s.IdleTimeout) != 30*time.Minute ||
				time.Duration(s.MaxLifetime) != 24*time.Hour || s.MaxUpload != 1<<30 || s.MaxSandboxes != 128 || s.MaxSandboxesPerOwner != 16 {
				t.Fatalf("got api %+v sandbox %+v, want the documented defaults", c.API, s)
			}
		}},
		{name: "api group root only", yaml: `api: {group: ""}`, check: func(t *testing.T, c Config) {
			if c.API.Group != "" {
				t.Fatalf("api.group: got %q, want \"\" kept (root only), not the default", c.API.Group)
			}
		}},
		{name: "api group named", yaml: "api: {group: agents, socket: /run/x.sock}", check: func(t *testing.T, c Config) {
			if c.API.Group != "agents" || c.API.Socket != "/run/x.sock" {
				t.Fatalf("got %+v", c.API)
			}
		}},
		{name: "api group numeric", yaml: "api: {group: \"1234\"}", check: func(t *testing.T, c Config) {
			if c.API.Group != "1234" {
				t.Fatalf("got %+v", c.API)
			}
		}},
		{name: "bad api group", yaml: "api: {group: \"a b\"}", wantErr: "api.group"},
		{name: "unknown api field", yaml: "api: {grop: x}", wantErr: "field grop not found"},
		{name: "api caps and caller limits", yaml: "api: {max_conns: 64, max_conns_per_uid: 8, max_streams_per_uid: 4, caller_limits: {memory: 2G, cpus: 4, pids: 2048}}", check: func(t *testing.T, c Config) {
			a := c.API
			want := CallerLimits{Memory: 2 << 30, CPUs: 4, Pids: 2048}
			if a.MaxConns != 64 || a.MaxConnsPerUID != 8 || a.MaxStreamsPerUID != 4 || a.CallerLimits != want || a.Group != DefaultAPIGroup {
				t.Fatalf("got %+v, want the caps 64/8/4, %+v and the default group", a, want)
			}
		}},
		{name: "api caps default to derived", yaml: "api: {socket: /run/x.sock}", check: func(t *testing.T, c Config) {
			if c.API.MaxConns != 0 || c.API.MaxConnsPerUID != 0 || c.API.MaxStreamsPerUID != 0 || c.API.CallerLimits != (CallerLimits{}) {
				t.Fatalf("got %+v, want every cap 0 (derived by the daemon)", c.API)
			}
		}},
		{name: "negative max_conns", yaml: "api: {max_conns: -1}", wantErr: "api.max_conns:"},
		{name: "max_conns too large", yaml: "api: {max_conns: 2000000}", wantErr: "api.max_conns:"},
		{name: "per-uid over total", yaml: "api: {max_conns: 8, max_conns_per_uid: 9}", wantErr: "api.max_conns_per_uid"},
		{name: "streams over per-uid", yaml: "api: {max_conns_per_uid: 4, max_streams_per_uid: 5}", wantErr: "api.max_streams_per_uid"},
		{name: "caller memory tiny", yaml: "api: {caller_limits: {memory: 1M}}", wantErr: "api.caller_limits.memory"},
		{name: "caller cpus negative", yaml: "api: {caller_limits: {cpus: -1}}", wantErr: "api.caller_limits.cpus"},
		{name: "caller cpus NaN", yaml: "api: {caller_limits: {cpus: .nan}}", wantErr: "api.caller_limits.cpus"},
		{name: "caller pids negative", yaml: "api: {caller_limits: {pids: -5}}", wantErr: "api.caller_limits.pids"},
		{name: "unknown caller_limits field", yaml: "api: {caller_limits: {sandboxes: 3}}", wantErr: "field sandboxes not found"},
		{name: "sandbox keys", yaml: "sandbox: {pool_size: 5, idle_timeout: 1m, max_lifetime: 2h, max_upload: 64M, max_sandboxes: 10, max_sandboxes_per_owner: 3}", check: func(t *testing.T, c Config) {
			s := c.Sandbox
			if s.PoolSize != 5 || time.Duration(s.IdleTimeout) != time.Minute || time.Duration(s.MaxLifetime) != 2*time.Hour ||
				s.MaxUpload != 64<<20 || s.MaxSandboxes != 10 || s.MaxSandboxesPerOwner != 3 {
				t.Fatalf("got %+v", s)
			}
		}},
		{name: "pool off", yaml: "sandbox: {pool_size: -1}", check: func(t *testing.T, c Config) {
			if c.Sandbox.PoolSize != -1 {
				t.Fatalf("pool_size: got %d, want -1 (off)", c.Sandbox.PoolSize)
			}
		}},
		{name: "per owner follows a small max", yaml: "sandbox: {max_sandboxes: 4}", check: func(t *testing.T, c Config) {
			if c.Sandbox.MaxSandboxesPerOwner != 4 {
				t.Fatalf("max_sandboxes_per_owner: got %d, want 4", c.Sandbox.MaxSandboxesPerOwner)
			}
		}},
		{name: "bad pool size", yaml: "sandbox: {pool_size: -2}", wantErr: "sandbox.pool_size"},
		{name: "huge pool size", yaml: "sandbox: {pool_size: 1000}", wantErr: "sandbox.pool_size"},
		{name: "idle over lifetime", yaml: "sandbox: {idle_timeout: 3h, max_lifetime: 2h}", wantErr: "sandbox.idle_timeout"},
		{name: "tiny idle", yaml: "sandbox: {idle_timeout: 1ms}", wantErr: "sandbox.idle_timeout"},
		{name: "huge lifetime", yaml: "sandbox: {max_lifetime: 10000h}", wantErr: "sandbox.max_lifetime"},
		{name: "tiny upload", yaml: "sandbox: {max_upload: 10}", wantErr: "sandbox.max_upload"},
		{name: "too many sandboxes", yaml: "sandbox: {max_sandboxes: 5000}", wantErr: "sandbox.max_sandboxes"},
		{name: "per owner over max", yaml: "sandbox: {max_sandboxes: 4, max_sandboxes_per_owner: 5}", wantErr: "sandbox.max_sandboxes_per_owner"},
		{name: "negative per owner", yaml: "sandbox: {max_sandboxes_per_owner: -1}", wantErr: "sandbox.max_sandboxes_per_owner"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Decode(strings.NewReader(tt.yaml))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want Size
		err  bool
	}{
		{"512", 512, false}, {"64K", 64 << 10, false}, {"512M", 512 << 20, false},
		{"100MB", 100 << 20, false}, {"1G", 1 << 30, false}, {"1GiB", 1 << 30, false},
		{"1.5G", 3 << 29, false}, {"", 0, true}, {"M", 0, true}, {"-1M", 0, true}, {"1X", 0, true},
		{"0", 0, false}, {"0.0", 0, false}, {"0.5K", 512, false},
		// A fraction of a byte: "0.5" was 0, the default, and "1.7" was 1.
		{"0.5", 0, true}, {"1.7", 0, true}, {"0.3K", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if (err != nil) != tt.err || got != tt.want {
				t.Fatalf("ParseSize(%q) = %v, %v; want %v, err=%v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("policy: {mode: report}\nlimits: {memory: 1G}\n")
	f.Add("dns: {upstreams: [\"1.1.1.1:53\"]}")
	f.Add("a: [")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Decode(strings.NewReader(s))
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decoded config fails validation: %v", err)
		}
	})
}

// Regression: an explicit zero or NaN limit (from a flag, after defaults) used to
// pass Validate and fall back to the default limit (or, for NaN cpus, reach the
// executor): `airlock run --cpus NaN` and `--tmp-size 0` ran the command.
func TestValidateRejectsExplicitZeroAndNaNLimits(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"cpus zero", func(c *Config) { c.Limits.CPUs = 0 }, "limits.cpus"},
		{"cpus nan", func(c *Config) { c.Limits.CPUs = math.NaN() }, "limits.cpus"},
		{"cpus negative", func(c *Config) { c.Limits.CPUs = -1 }, "limits.cpus"},
		{"pids zero", func(c *Config) { c.Limits.Pids = 0 }, "limits.pids"},
		{"timeout zero", func(c *Config) { c.Limits.Timeout = 0 }, "limits.timeout"},
		{"tmp size zero", func(c *Config) { c.Limits.TmpSize = 0 }, "limits.tmp_size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mod(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error naming %s", err, tt.want)
			}
		})
	}
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: got %v, want nil", err)
	}
}

// TestDurationSetUnderANanosecond: "0.4ns" parsed to 0, which every timeout
// reads as "the default", so a limit written as not zero was enforced as
// the default without being checked.
func TestDurationSetUnderANanosecond(t *testing.T) {
	tests := []struct {
		in      string
		want    Duration
		wantErr bool
	}{
		{"0", 0, false}, {"0s", 0, false}, {"0.0s", 0, false}, {"0h0m", 0, false},
		{"1ns", 1, false}, {"1.5ns", 1, false}, {"10s", Duration(10 * time.Second), false},
		{"0.4ns", 0, true}, {"0.9ns", 0, true}, {"-1s", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var d Duration
			err := d.Set(tt.in)
			if (err != nil) != tt.wantErr || d != tt.want {
				t.Fatalf("Set(%q): got %v, %v, want %v, error %v", tt.in, d, err, tt.want, tt.wantErr)
			}
		})
	}
}
