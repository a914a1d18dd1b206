package config

// CA defaults.
const (
	DefaultCACert = "/etc/airlock/ca.pem"
	DefaultCAKey  = "/etc/airlock/ca.key"
)

// CA is the interception CA made by `airlock ca init`.
type CA struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

func (c *CA) applyDefaults() {
	if c.Cert == "" {
		c.Cert = DefaultCACert
	}
	if c.Key == "" {
		c.Key = DefaultCAKey
	}
}
