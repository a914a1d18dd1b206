package export

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/grpc/credentials"
)

// OTLPAttrPrefix prefixes the airlock fields among a log record's attributes.
const OTLPAttrPrefix = "airlock."

// otlpSink builds log records with the OpenTelemetry SDK and exports each
// batch synchronously through an OTLP exporter, so Send returns only once the
// collector answered. The SDK's own retry is off: the Shipper retries.
type otlpSink struct {
	exp    sdklog.Exporter
	prov   *sdklog.LoggerProvider
	logger log.Logger
	coll   *collector
}

func newOTLPSink(ctx context.Context, cfg Config, scheme, endpoint string) (*otlpSink, error) {
	exp, err := newOTLPExporter(ctx, cfg, scheme, endpoint)
	if err != nil {
		return nil, err
	}
	coll := &collector{}
	res := resource.NewSchemaless(attribute.String("service.name", "airlock"), attribute.String("service.version", cfg.Version))
	prov := sdklog.NewLoggerProvider(sdklog.WithProcessor(coll), sdklog.WithResource(res))
	return &otlpSink{exp: exp, prov: prov, logger: prov.Logger("github.com/airlock-dev/airlock/audit/export"), coll: coll}, nil
}

func newOTLPExporter(ctx context.Context, cfg Config, scheme, endpoint string) (sdklog.Exporter, error) {
	u, _ := url.Parse(endpoint)
	switch scheme {
	case "http", "https":
		opts := []otlploghttp.Option{otlploghttp.WithEndpoint(u.Host), otlploghttp.WithTimeout(cfg.Timeout),
			otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: false})}
		if u.Path != "" && u.Path != "/" {
			opts = append(opts, otlploghttp.WithURLPath(u.Path))
		}
		if scheme == "http" {
			opts = append(opts, otlploghttp.WithInsecure())
		} else {
			tc, err := cfg.TLS.tlsConfig()
			if err != nil {
				return nil, err
			}
			opts = append(opts, otlploghttp.WithTLSClientConfig(tc))
		}
		exp, err := otlploghttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("export: otlp http: %w", err)
		}
		return exp, nil
	default: // grpc, grpcs
		opts := []otlploggrpc.Option{otlploggrpc.WithEndpoint(u.Host), otlploggrpc.WithTimeout(cfg.Timeout),
			otlploggrpc.WithRetry(otlploggrpc.RetryConfig{Enabled: false})}
		if scheme == "grpc" {
			opts = append(opts, otlploggrpc.WithInsecure())
		} else {
			tc, err := cfg.TLS.tlsConfig()
			if err != nil {
				return nil, err
			}
			opts = append(opts, otlploggrpc.WithTLSCredentials(credentials.NewTLS(tc)))
		}
		exp, err := otlploggrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("export: otlp grpc: %w", err)
		}
		return exp, nil
	}
}

// Send emits one log record per event (body: the record's line; attributes:
// the airlock fields) and exports them as one request.
func (s *otlpSink) Send(ctx context.Context, batch []Event) error {
	now := time.Now()
	for i := range batch {
		e := &batch[i]
		var rec log.Record
		rec.SetObservedTimestamp(now)
		lv := levelOf(e)
		rec.SetSeverity(otlpSeverity[lv])
		rec.SetSeverityText(strings.ToUpper(otlpSeverity[lv].String()))
		if e.Gap != nil {
			rec.SetTimestamp(now)
			rec.SetEventName("airlock.audit." + GapKind)
			rec.SetBody(attribute.StringValue(string(gapLine(e.Gap))))
		} else {
			rec.SetTimestamp(e.Record.TS)
			rec.SetEventName("airlock.audit." + e.Record.Kind)
			rec.SetBody(attribute.StringValue(string(e.Line)))
		}
		for _, f := range fields(e) {
			rec.AddAttributes(otlpAttr(f))
		}
		s.logger.Emit(ctx, rec)
	}
	recs := s.coll.take()
	if err := s.exp.Export(ctx, recs); err != nil {
		return fmt.Errorf("export: otlp: %w", err)
	}
	return nil
}

func (s *otlpSink) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.prov.Shutdown(ctx)
	return s.exp.Shutdown(ctx)
}

var otlpSeverity = map[level]log.Severity{levelInfo: log.SeverityInfo, levelWarn: log.SeverityWarn, levelError: log.SeverityError, levelCritical: log.SeverityFatal}

func otlpAttr(f field) attribute.KeyValue {
	k := OTLPAttrPrefix + f.Key
	switch v := f.Value.(type) {
	case int64:
		return attribute.Int64(k, v)
	case float64:
		return attribute.Float64(k, v)
	case []string:
		return attribute.StringSlice(k, v)
	}
	return attribute.String(k, fieldString(f.Value))
}

// collector is the SDK processor that keeps emitted records for the next
// synchronous export (instead of a batch processor exporting in the
// background, which could not tell the Shipper what was acknowledged).
type collector struct {
	mu   sync.Mutex
	recs []sdklog.Record
}

func (c *collector) OnEmit(_ context.Context, r *sdklog.Record) error {
	c.mu.Lock()
	c.recs = append(c.recs, r.Clone())
	c.mu.Unlock()
	return nil
}

func (c *collector) take() []sdklog.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.recs
	c.recs = nil
	return r
}

func (c *collector) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (c *collector) Shutdown(context.Context) error                         { return nil }
func (c *collector) ForceFlush(context.Context) error                       { return nil }

var _ sdklog.Processor = (*collector)(nil)
