// Package secrets adds credentials to a sandbox's HTTPS requests at the
// gateway, so the sandbox never holds a raw key, and keeps the key from coming
// back in responses. It owns the secrets file (LoadFile, Parse, Config), the
// sources of values (environment, file, command) with versions and keyed
// fingerprints, binding matching, placeholders, the checks that deny a
// placeholder where it does not belong, injection, AWS SigV4 verification and
// re-signing (aws.go, sigv4*.go), minted credentials (aws_assume.go, oauth.go,
// githubapp.go; a 401 refreshes once, oauth_reauth.go; revoked when the
// sandbox goes, revoke.go), response scrubbing and the Value type that
// prints [REDACTED] in every format. The gateway also calls Reauthorize.
//
// It never decides policy and never dials: the gateway asks policy first and
// only then asks secrets, so a binding never widens policy. Token endpoints
// are called through the TokenClient the gateway hands it (SetTokenClient).
//
// Entry points: LoadFile, New; the gateway calls the Injector through its
// gateway.Injector seam, the daemon calls Attach (bindings a caller of its
// API attaches at create; who may attach what is attach.go's rule),
// Placeholders, AWSCredentialsFileFor, Forget and SetTokenClient.
// Modes, placeholders, scrubbing and errors: secrets/DESIGN.md;
// the file format: docs/SECRETS.md and testdata/example.yaml; AWS, OAuth,
// GitHub App: docs/CREDENTIALS.md.
//
// secrets must never import: config, policy, gateway, dnsfilter, netns,
// sandboxd, daemon, cmd/airlock.
package secrets
