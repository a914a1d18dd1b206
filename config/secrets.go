package config

// Secrets points at the secrets file.
type Secrets struct {
	File string `yaml:"file"`
}
