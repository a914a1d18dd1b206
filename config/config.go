package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"gopkg.in/yaml.v3"
)

// Config is the whole file.
type Config struct {
	Policy   Policy   `yaml:"policy"`
	DNS      DNS      `yaml:"dns"`
	Upstream Upstream `yaml:"upstream"`
	Audit    Audit    `yaml:"audit"`
	CA       CA       `yaml:"ca"`
	Secrets  Secrets  `yaml:"secrets"`
	Limits   Limits   `yaml:"limits"`
	Sandbox  Sandbox  `yaml:"sandbox"`
	Pool     Pool     `yaml:"pool"`
	API      API      `yaml:"api"`
	Metrics  Metrics  `yaml:"metrics"`
	Approval Approval `yaml:"approval"` // approval.go
	Inspect  Inspect  `yaml:"inspect"`  // inspect.go
}

// Default returns the configuration used when no file is given.
func Default() Config {
	var c Config
	c.applyDefaults()
	return c
}

// Load reads and validates a YAML file. An empty path returns Default().
func Load(path string) (Config, error) {
	if path == "" {
		return Default(), nil
	}
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	c, err := Decode(f)
	if err != nil {
		return Config{}, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Decode decodes strictly, applies defaults and validates.
func Decode(r io.Reader) (Config, error) {
	data, err := io.ReadAll(io.LimitReader(r, 1<<20+1))
	if err != nil {
		return Config{}, err
	}
	if len(data) > 1<<20 {
		return Config{}, errors.New("file larger than 1 MiB")
	}
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("parse: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, errors.New("parse: more than one YAML document")
	}
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func (c *Config) applyDefaults() {
	c.Policy.applyDefaults()
	c.DNS.applyDefaults()
	c.Audit.applyDefaults()
	c.CA.applyDefaults()
	c.Limits.applyDefaults()
	c.API.applyDefaults()
	c.Sandbox.applyDefaults()
	c.Pool.applyDefaults(c.Sandbox.PoolSize)
	c.Approval.applyDefaults()
	c.Inspect.applyDefaults()
	c.Metrics.applyDefaults()
}

// Validate names the first bad field and what it allows.
func (c *Config) Validate() error {
	if err := c.Policy.validate(); err != nil {
		return err
	}
	if err := c.DNS.validate(); err != nil {
		return err
	}
	if err := c.Policy.validateBundle(c.Secrets.File); err != nil {
		return err
	}
	if err := c.Audit.validate(); err != nil {
		return err
	}
	if err := c.Upstream.validate(c.Secrets.File); err != nil {
		return err
	}
	if err := c.Limits.validate(); err != nil {
		return err
	}
	if err := c.Sandbox.validate(); err != nil {
		return err
	}
	if err := c.Pool.validate(c.Sandbox.PoolSize); err != nil {
		return err
	}
	if err := c.Approval.validate(); err != nil {
		return err
	}
	if err := c.Inspect.validate(); err != nil {
		return err
	}
	return c.API.validate()
}
